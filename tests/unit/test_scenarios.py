"""The scenario registry is the one source of each runbook's parameters, limits and control: the
notebooks' parameters cells must say exactly what the declarations say."""

from __future__ import annotations

import inspect
import re

import nbformat
import pytest

from drillbook.errors import ConfigError
from drillbook.parameters import INJECTED, available_runbooks, notebook_parameters, runbook_path, validate_parameters
from drillbook.scenarios import REGISTRY, UNKNOWN_CONTROL, control_of, scenario


def test_every_shipped_runbook_is_declared_and_every_declaration_has_its_runbook():
    assert set(REGISTRY) == set(available_runbooks(oncall=True))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_notebook_parameters_cell_equals_the_declaration(name):
    declared = REGISTRY[name].parameters
    cell = {n: p.default for n, p in notebook_parameters(runbook_path(name)).items() if n not in INJECTED}
    model = {n: field.default for n, field in declared.model_fields.items()}
    assert cell == model
    assert {n: type(v) for n, v in cell.items()} == {n: type(v) for n, v in model.items()}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_notebook_files_its_evidence_under_the_declared_control(name):
    source = "\n".join(c.source for c in nbformat.read(str(runbook_path(name)), as_version=4).cells)
    declared = REGISTRY[name]
    if declared.drill is not None:  # the control comes from the declaration itself (runbook.drill)
        called = re.search(r'runbook\.drill\("([^"]+)", target, drillbook_work_dir, drillbook_state_dir,(.*?)\)',
                           source, re.S)
        assert called and called.group(1) == name
        passed = dict(re.findall(r"(\w+)=(\w+)", called.group(2)))
        assert passed == {field: field for field in declared.parameters.model_fields}, "every parameter, by name"
    else:
        begun = re.search(r'Run\.begin\("([^"]+)", "([^"]+)"', source)
        assert begun and begun.groups() == (name, declared.control)
    assert control_of(name) == declared.control


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.drill))
def test_the_declared_drill_takes_every_parameter_by_name(name):
    declared = REGISTRY[name]
    signature = inspect.signature(declared.drill_function())
    taken = list(signature.parameters)[1:]  # after the run
    assert set(declared.parameters.model_fields) <= set(taken)
    extra = [n for n in taken if n not in declared.parameters.model_fields]
    assert all(signature.parameters[n].default is not inspect.Parameter.empty for n in extra), extra


def test_an_undeclared_runbook_has_the_unknown_control():
    assert control_of("my-own-drill") == UNKNOWN_CONTROL and scenario("my-own-drill") is None


@pytest.mark.parametrize(("runbook", "overrides", "message"), [
    ("ha-replica-loss", {"kill_count": "0"}, "invalid kill_count"),
    ("ha-replica-loss", {"kill_after_s": "16"}, "must be below duration_s"),
    ("ha-replica-loss", {"duration_s": "12"}, "duration_s 12 cannot cover a recovery: the kill at kill_after_s 4s, "
                                             "max_recovery_s 10s and 2s held at baseline need duration_s >= 16"),
    ("ha-replica-loss", {"users": "0"}, "invalid users"),
    ("ha-replica-loss", {"max_error_rate": "1.5"}, "invalid max_error_rate"),
    ("cold-start", {"trials": "0"}, "invalid trials"),
    ("cold-start", {"slo_p95_s": "0"}, "invalid slo_p95_s"),
    ("restore-drill", {"sessions": "0"}, "invalid sessions"),
    ("noisy-neighbour", {"burst_s": "0"}, "invalid burst_s"),
    ("shed-noisy-tenant", {"tenant": "tenant-b", "rps": "0"}, "invalid rps"),
])
def test_parameters_that_cannot_give_a_meaningful_result_are_refused(runbook, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_parameters(runbook_path(runbook), overrides)


def test_the_defaults_are_within_their_own_limits():
    for name in REGISTRY:
        validate_parameters(runbook_path(name), {"tenant": "tenant-b"} if name == "shed-noisy-tenant" else {})


@pytest.mark.parametrize(("text", "value"), [("false", False), ("False", False), ("no", False), ("true", True),
                                             ("True", True), ("yes", True)])
def test_a_flag_takes_the_words_its_error_line_offers(text, value):
    assert validate_parameters(runbook_path("sandbox-loss"), {"kill_service": text})["kill_service"] is value


def test_a_flag_refuses_anything_else_in_one_line():
    with pytest.raises(ConfigError, match="invalid kill_service: 'maybe' is not true or false"):
        validate_parameters(runbook_path("sandbox-loss"), {"kill_service": "maybe"})
