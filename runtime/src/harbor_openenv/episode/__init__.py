"""An episode's life: the runtime a server's sessions share, the episode, the agent's actions,
solve and evaluate, the warm pool, the disk guard, artifacts, records and metrics.
"""
