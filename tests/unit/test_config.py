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


# -- a reference-platform service as a container (deploy/platform) ----------------------------

TOKEN = "internal-token-0123456789"


def test_a_container_service_reads_what_deploy_platform_sets(tmp_path):
    from drillbook.config import service_environment
    from drillbook.sandbox.runtime import Runtime

    keys = tmp_path / "tenant-keys"
    keys.write_text("# tenant=key\ntenant-a = key-a\ntenant-b=key-b\n")
    env = service_environment({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "HOSTNAME": "agent-7d9f-x2",
                               "DRILLBOOK_TENANT_KEYS_FILE": str(keys),
                               "DRILLBOOK_INFERENCE_URL": "http://gateway.agents.svc/internal/v1/generate",
                               "DRILLBOOK_PG_DSN": "postgresql://agent:pw@state-store:5432/drillbook",
                               "DRILLBOOK_GPU_SLOTS": "4", "DRILLBOOK_MODEL_LOAD_DELAY_S": "0.3",
                               "DRILLBOOK_DEFECTS": "no-retries, no-fair-sharing", "UNRELATED": "x"})
    runtime = Runtime.from_environment(env)
    assert env.replica == "agent-7d9f-x2" and env.port == 8080
    assert runtime.tenant_keys == {"tenant-a": "key-a", "tenant-b": "key-b"}
    assert runtime.config.tenants == ["tenant-a", "tenant-b"]
    assert runtime.config.store == "postgres" and runtime.config.dsn.endswith("/drillbook")
    assert runtime.config.gpu_slots == 4 and runtime.config.model_load_delay_s == 0.3
    assert runtime.config.has(Defect.NO_RETRIES) and runtime.config.has(Defect.NO_FAIR_SHARING)
    assert runtime.inference_url == "http://gateway.agents.svc/internal/v1/generate"
    assert runtime.internal_token == TOKEN and runtime.kubernetes is None


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "DRILLBOOK_INTERNAL_TOKEN"),
        ({"DRILLBOOK_INTERNAL_TOKEN": "short"}, "internal_token"),
        ({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_PORT": "http"}, "port"),
        ({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_TENANT_KEYS_FILE": "/nonexistent/keys"}, "/nonexistent/keys"),
        ({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_DISCOVERY": "consul"}, "DRILLBOOK_DISCOVERY"),
        ({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_DISCOVERY": "kubernetes"}, "outside a pod"),
    ],
)
def test_a_container_service_with_unusable_settings_gets_one_line(env, names):
    from drillbook.config import service_environment

    with pytest.raises(ConfigError) as caught:
        service_environment(env)
    assert names in str(caught.value) and "\n" not in str(caught.value)


def test_a_tenant_keys_file_that_is_not_tenant_equals_key_names_its_line(tmp_path):
    from drillbook.config import service_environment

    keys = tmp_path / "tenant-keys"
    keys.write_text("tenant-a=key-a\njust-a-key\n")
    with pytest.raises(ConfigError, match="line 2"):
        service_environment({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_TENANT_KEYS_FILE": str(keys)})


def test_a_bad_sandbox_setting_in_a_container_names_it():
    from drillbook.config import service_environment
    from drillbook.sandbox.runtime import Runtime

    env = service_environment({"DRILLBOOK_INTERNAL_TOKEN": TOKEN, "DRILLBOOK_GPU_SLOTS": "many"})
    with pytest.raises(ConfigError, match="gpu_slots"):
        Runtime.from_environment(env)


def test_an_error_line_is_one_line_and_bounded_whatever_it_quotes(capsys):
    from drillbook.cli.app import LINE_MAX, _say

    _say("invalid key_env: '" + "x" * 5_000_000 + "'\nsecond line")
    written = capsys.readouterr().err
    assert written.count("\n") == 1 and len(written) <= LINE_MAX + len("drillbook: \n")
    assert written.rstrip().endswith("characters more)")
