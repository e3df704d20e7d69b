"""Where a server's episodes run: one :class:`~.base.Backend` per mode, chosen at start-up."""
