"""The review pipeline as a Celery task (PROTOCOL §13.2): enqueued after each
``work.submit`` commits; it reads the Artifacts and records its results
through ``accept()`` as the Organization's control plane
(``ext.mwportal.review.result_record``). Running it twice records once."""

from __future__ import annotations

from celery import shared_task

from .review import review_now


@shared_task(name="artifacts.review_submission")
def review_submission(workitem_id: str) -> bool:
    """Review the WorkItem's latest submission; True when results were recorded."""
    return review_now(workitem_id) is not None
