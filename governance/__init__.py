"""Organization governance of Missions (PROTOCOL §9.1, §18, §20): the Policy Log,
Cooperation Override Grants, runaway controls and Extension Profiles."""
