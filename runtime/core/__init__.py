"""agentledger.core: the sans-IO heart of a run.

Only the standard library and msgspec are imported here: no clock, no randomness, no IO. A test
imports this package in a fresh interpreter and checks ``sys.modules``.

``__all__`` is what drivers and tests use; helpers a module keeps to itself are underscored
there. Names that left the public core are served for one release with a ``DeprecationWarning``
(docs/api.md lists them).
"""

import warnings
from typing import Any

from .approvals import *  # noqa: F403
from .approvals import __all__ as _approvals_all
from .claims import *  # noqa: F403
from .claims import __all__ as _claims_all
from .collector import *  # noqa: F403
from .collector import __all__ as _collector_all
from .commands import *  # noqa: F403
from .commands import __all__ as _commands_all
from .depth import *  # noqa: F403
from .depth import __all__ as _depth_all
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .events import *  # noqa: F403
from .events import __all__ as _events_all
from .limits import *  # noqa: F403
from .limits import __all__ as _limits_all
from .loop import *  # noqa: F403
from .loop import __all__ as _loop_all
from .machine import *  # noqa: F403
from .machine import __all__ as _machine_all
from .messages import *  # noqa: F403
from .messages import __all__ as _messages_all
from .projections import *  # noqa: F403
from .projections import __all__ as _projections_all

__all__ = (
    *_approvals_all,
    *_claims_all,
    *_collector_all,
    *_commands_all,
    *_errors_all,
    *_depth_all,
    *_events_all,
    *_limits_all,
    *_loop_all,
    *_machine_all,
    *_messages_all,
    *_projections_all,
)

_DEPRECATED = {
    "Step": ("machine", "Reaction", "is now Reaction"),
    "refold": ("machine", "refold", "is now RunMachine.from_events"),
    "fold_views": ("projections", "fold_views", "is now Views.from_events"),
    "AWAITING": ("claims", "_AWAITING", "is no longer public"),
    "CallProgress": ("claims", "_CallProgress", "is no longer public"),
    "answered_calls": ("approvals", "_answered_calls", "is no longer public"),
    "call_progress": ("claims", "_call_progress", "is no longer public"),
    "check_json": ("limits", "_check_json", "is no longer public"),
    "exception_text": ("projections", "_exception_text", "is no longer public"),
    "json_depth": ("depth", "_json_depth", "is no longer public"),
}
"""Old public name -> (its module, the name it has there now, what became of it): one release."""


def __getattr__(name: str) -> Any:
    moved = _DEPRECATED.get(name)
    if moved is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, new, now = moved
    warnings.warn(f"agentledger.core.{name} {now}", DeprecationWarning, stacklevel=2)
    value = globals()[module]
    with warnings.catch_warnings():  # warned once, here
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(value, new)
