"""An episode's life: the runtime a server's sessions share, the episode, the agent's actions,
solve and evaluate, forks, artifacts and records.
"""
