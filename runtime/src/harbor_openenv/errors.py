"""The root of the runtime's errors: every exception ``harbor_openenv`` defines derives from
:class:`HarborOpenEnvError` (besides the bases its callers catch it by, such as ``LookupError``),
so ``except HarborOpenEnvError`` tells the runtime's own refusals from a bug's exceptions."""

from __future__ import annotations


class HarborOpenEnvError(Exception):
    """An error of harbor-openenv: a sandbox, an image, a dataset, a harness, an action..."""
