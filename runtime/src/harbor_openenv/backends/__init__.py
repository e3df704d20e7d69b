"""Where a server's episodes run: one :class:`~.base.Backend` per mode (``local``: this server's
Docker engine; ``several``: several engines; ``harbor``: Harbor's environments), chosen once at
start-up by :func:`~.factory.chosen`; an environment asked for as one :class:`~.request.EnvRequest`.
"""
