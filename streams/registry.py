"""Which projections the worker folds: the built-ins plus any named by import path in settings."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from projections.commitments import CommitmentProjection
from projections.overview import ChannelOverviewProjection
from projections.projection import ChannelProjection
from streams.errors import ChorusError
from streams.settings import Settings


class ProjectionImportError(ChorusError, ValueError):
    pass


def load_projection(path: str) -> ChannelProjection[Any]:
    """`package.module:Name`, where Name is a projection class (called without arguments),
    a factory function, or a projection instance."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ProjectionImportError(f"projection {path!r} must look like 'package.module:Name'")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ProjectionImportError(f"cannot import projection {path!r}: {error}") from None
    is_factory = inspect.isclass(target) or (callable(target) and not _is_projection(target))
    projection = target() if is_factory else target
    if not _is_projection(projection):
        raise ProjectionImportError(
            f"{path!r} is not a ChannelProjection (needs name, version, identity(), apply())"
        )
    return projection  # type: ignore[no-any-return]


def _is_projection(candidate: Any) -> bool:
    return (
        isinstance(getattr(candidate, "name", None), str)
        and isinstance(getattr(candidate, "version", None), int)
        and callable(getattr(candidate, "identity", None))
        and callable(getattr(candidate, "apply", None))
    )


def registered_projections(
    import_paths: list[str], settings: Settings | None = None
) -> list[ChannelProjection[Any]]:
    """The built-ins, with their bounds from `settings` (defaults without), then the others."""
    bounds = settings or Settings.model_construct()
    projections: list[ChannelProjection[Any]] = [
        CommitmentProjection(bounds.commitments_keep_terminal, bounds.commitments_max_active),
        ChannelOverviewProjection(bounds.overview_max_participants, bounds.overview_max_topics),
    ]
    projections.extend(load_projection(path) for path in import_paths)
    names = [p.name for p in projections]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProjectionImportError(f"projection names must be unique; repeated: {duplicates}")
    return projections
