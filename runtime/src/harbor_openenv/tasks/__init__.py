"""The task format: task.toml, task folders, datasets of them, rewards, steps and Harbor's rules
(pydantic only).
"""
