"""The codecs: one module per method or family (see docs/compressors.md for the table).

Importing this package imports every module in it, so every ``Compressor``
subclass registers itself (``compressors.core.registry``) before anything is
used: a new method is a new module here, with no list to edit.
"""
import importlib as _importlib
import pkgutil as _pkgutil

for _info in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_info.name}")
del _info
