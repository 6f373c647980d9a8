"""What a method can do is the registry's answer everywhere (compressors/core/registry.py): the study's
settings (orchestrator/study/settings.py: the registry's ``algorithm_choices``), the options the Reducer
and the hooks check (compressors/comm/options.py: every one of ``algorithms``) and the hook ``comm_hook``
picks agree with it for every registered method."""
from __future__ import annotations

import pytest

from compressors import ddp
from compressors.comm.options import check_options
from compressors.core import registry
from orchestrator.study import settings

NAMES = registry.names()
# The methods a DDP hook runs (an optimizer method averages in its optimizer's step instead).
HOOKED = [name for name in NAMES if not registry.optimizer_method(name)]
# Every algorithm name a method might be given: the shared ones and each hook-only method's own.
EVERY_ALGORITHM = registry.ALGORITHMS + tuple(registry.HOOK_METHODS)


def _settings_accept(name: str, **given: object) -> bool:
    # an optimizer method takes Adam's steps
    optimizer = {"optimizer": "adam"} if registry.optimizer_method(name) else {}
    try:
        settings.check_training({"compressor": name, **optimizer, **given})
    except ValueError:
        return False
    return True


def _hook(name: str, algorithm: str | None) -> ddp.HookState:
    # The reference implementation: no kernels to compile for a check of the choices alone.
    return ddp.comm_hook(name, algorithm, impl="reference", overlap=False)


@pytest.mark.parametrize("name", NAMES)
def test_the_settings_offer_the_registrys_choices_and_default(name):
    choices = registry.algorithm_choices(name)
    assert settings.algorithms(name) == choices and set(choices) <= set(registry.algorithms(name))
    if registry.own_communication(name):  # its one algorithm is itself: nothing to choose, the setting stays null
        assert choices == () and settings.default_algorithm(name) is None
    else:
        assert settings.default_algorithm(name) == registry.default_algorithm(name) in choices
    assert registry.default_algorithm(name) in registry.algorithms(name)
    assert _settings_accept(name)
    for algorithm in registry.ALGORITHMS:
        assert _settings_accept(name, algorithm=algorithm) == (algorithm in choices), algorithm


@pytest.mark.parametrize("name", HOOKED)
def test_the_hooks_take_the_registrys_algorithms_and_default(name):
    assert _hook(name, None).algorithm == registry.default_algorithm(name)
    for algorithm in EVERY_ALGORITHM:
        if algorithm in registry.algorithms(name):
            assert _hook(name, algorithm).algorithm == algorithm
        else:
            with pytest.raises(ValueError, match=f"algorithm {algorithm!r} is invalid for {name!r}"):
                _hook(name, algorithm)


def test_an_optimizer_method_has_no_hook():
    for name in registry.OPTIMIZER_METHODS:
        with pytest.raises(ValueError, match="averages inside its optimizer's step"):
            _hook(name, None)
        assert not registry.plain_ddp(name)


@pytest.mark.parametrize("name", HOOKED)
def test_plain_ddp_is_pytorchs_allreduce_hook_and_nothing_else(name):
    for algorithm in registry.algorithms(name):
        plain = registry.plain_ddp(name, algorithm)
        assert (type(_hook(name, algorithm)) is ddp.AllreduceHookState) == plain, algorithm
        assert plain == (name == "fp32" and algorithm == "allreduce"), algorithm
    assert registry.plain_ddp(name) == registry.plain_ddp(name, registry.default_algorithm(name))


@pytest.mark.parametrize("name", NAMES)
def test_impls_agree_between_the_settings_the_options_and_the_registry(name):
    for impl in registry.IMPLS:
        has = impl in registry.impls(name)
        if has:
            check_options(name, impl=impl)
        else:
            with pytest.raises(ValueError, match="kernels"):
                check_options(name, impl=impl)
        for use_gpu in (False, True):
            runs = registry.runs_on(impl, "cuda" if use_gpu else "cpu")
            assert _settings_accept(name, impl=impl, use_gpu=use_gpu) == (has and runs), (impl, use_gpu)
    assert registry.has_numba(name) == ("numba" in registry.impls(name))
    assert registry.has_cuda(name) == ("cuda" in registry.impls(name))


def test_hook_only_methods_have_no_kernels_and_only_their_own_algorithm():
    assert set(registry.HOOK_METHODS) == {name for name in NAMES if registry.hook_only(name)} == {"powersgd"}
    for name in registry.HOOK_METHODS:
        assert registry.algorithms(name) == (name,) and registry.impls(name) == ("auto", "reference")


def test_the_casts_are_offered_as_baselines_and_run_over_every_algorithm():
    for name in registry.casts():
        assert registry.algorithm_choices(name) == ("allreduce", "hierarchical")
        assert registry.algorithms(name) == registry.ALGORITHMS
    assert not registry.hook_only("nosuch") and not registry.plain_ddp("nosuch")
