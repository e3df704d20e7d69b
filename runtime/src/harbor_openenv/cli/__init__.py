"""The ``harbor-openenv`` command line: the parser and its commands (``main``), the checks
(``check``), the update (``update``, ``pins``)."""
