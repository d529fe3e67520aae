"""Conversations and Messages (PROTOCOL §9): the Group's planning Conversation, one per
WorkItem, and Messages that never authorize anything (``authority: false``)."""
