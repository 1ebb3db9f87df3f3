"""`divclip check`: what a clip setting means, whether it binds, which tokens it clips (issue 8).

Public API (imported lazily, so that `divclip --help` stays cheap):
  build_report(config=None, rollouts=None, ...) -> dict   the whole report (CLI and app share it)
  report_from_uploads(config=(name, bytes), ...) -> dict  the app page's entry to the same
  format_report(report) -> str                            plain-text rendering
  jsonable(report) -> dict                                the report with non-finite floats as null (strict JSON)
  read_config / clip_settings / check_settings            config -> EngineRead -> [Finding] (the readers:
                                                           divclip.engines.config)
  load_rollouts / analyse_rollouts                         rollout file -> Rollouts -> rollout section
  SanityInputError, ConfigError, RolloutFileError          every bad input (all ValueError)
"""

from importlib import import_module

_EXPORTS = {
    "ConfigError": "errors",
    "Finding": "checks",
    "Limits": "validation",
    "RawConfig": "divclip.engines.config",
    "RolloutFileError": "errors",
    "RolloutOptions": "rollouts",
    "Rollouts": "validation",
    "SanityInputError": "errors",
    "analyse_rollouts": "rollouts",
    "build_report": "report",
    "check_settings": "checks",
    "clip_settings": "settings",
    "format_report": "text",
    "jsonable": "report",
    "load_rollouts": "loaders",
    "read_config": "divclip.engines.config",
    "report_from_uploads": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'divclip.sanity' has no attribute {name!r}")
    module = _EXPORTS[name]
    return getattr(import_module(module if "." in module else f"divclip.sanity.{module}"), name)
