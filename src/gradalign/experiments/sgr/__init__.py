"""SGR part (Yang et al. 2024): one module per notebook."""

from importlib import import_module

_MODULES = ("theory", "local_bp", "memory")  # TEMPORARY while the part is being built: missing ones skipped

EXPERIMENTS = []
for _name in _MODULES:
    try:
        _module = import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as err:
        if err.name == f"{__name__}.{_name}":
            continue
        raise
    EXPERIMENTS += _module.EXPERIMENTS
