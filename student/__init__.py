"""Students: policies from robot-legal observations only. Never imports teacher/."""
