import pytest

from drillbook.config import Defect, SandboxConfig, build
from drillbook.errors import ConfigError


def test_defaults_are_valid():
    config = build(SandboxConfig)
    assert config.store == "sqlite" and config.agents == 2 and config.defects == []


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"agents": -1}, "agents"),
        ({"store": "mysql"}, "store"),
        ({"tenants": []}, "tenants"),
        ({"tenants": ["Bad Name"]}, "tenants"),
        ({"tenants": ["a", "a"]}, "tenants"),
        ({"defects": ["no-such-defect"]}, "defects"),
        ({"store": "postgres"}, "DSN"),
        ({"gateway_port": 70000}, "gateway_port"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_values_give_one_line_naming_the_field(values, names):
    with pytest.raises(ConfigError) as caught:
        build(SandboxConfig, **values)
    message = str(caught.value)
    assert names in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_slow_model_load_defect_raises_the_load_delay():
    config = build(SandboxConfig, model_load_delay_s=0.1, defects=["slow-model-load"])
    assert config.has(Defect.SLOW_MODEL_LOAD)
    assert config.effective_model_load_delay_s > 1.0
