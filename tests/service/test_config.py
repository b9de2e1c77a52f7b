"""Service configuration: TOML, environment overrides, validation (spec/service.md SERVICE-1, SERVICE-2)."""

from __future__ import annotations

import pytest

from lakefmt.errors import ValidationError
from lakefmt.service.config import ServiceConfig, check_exposure, is_loopback, load_config, parse_seconds


def write(tmp_path, text: str):
    path = tmp_path / "lakefmt.toml"
    path.write_text(text)
    return path


def test_defaults_follow_arc():
    """SERVICE-2: compaction hourly at :05 with 2 concurrent jobs; other kinds off."""
    config = load_config()
    assert config.compaction.enabled and config.compaction.schedule == "5 * * * *"
    assert config.max_concurrent_jobs == 2 and config.port == 8765 and config.host == "127.0.0.1"
    assert not (config.manifests.enabled or config.expire.enabled or config.orphans.enabled)
    assert config.token is None and not config.auth_enabled


def test_toml_then_environment_then_arguments(tmp_path):
    path = write(tmp_path, """
[service]
port = 9000
max_concurrent_jobs = 3
include = ["artemis.*"]
token = "from-file"

[compaction]
schedule = "*/10 * * * *"
read_mb_per_s = 50

[expire]
enabled = true
older_than = "7d"
retain_last = 10

[table."artemis.downlinks"]
strategy = "zorder"
columns = ["payload_id", "sensor_kind"]
""")
    env = {"LAKEFMT_SERVICE_PORT": "9100", "LAKEFMT_COMPACTION_ENABLED": "false",
           "LAKEFMT_ORPHANS_ENABLED": "yes", "LAKEFMT_SERVICE_EXCLUDE": "artemis.tmp_*, scratch.*",
           "LAKEFMT_WAREHOUSE": "ignored: not a service key", "LAKEFMT_EXPIRE_RETAIN_LAST": "none"}
    config = load_config(path, environ=env, port=0, host=None)
    assert config.port == 0 and config.max_concurrent_jobs == 3
    assert config.include == ("artemis.*",) and config.exclude == ("artemis.tmp_*", "scratch.*")
    assert not config.compaction.enabled and config.compaction.schedule == "*/10 * * * *"
    assert config.compaction.read_mb_per_s == 50.0
    assert config.expire.enabled and config.expire.older_than == "7d" and config.expire.retain_last is None
    assert config.orphans.enabled
    policy = config.policy("artemis.downlinks")
    assert policy.strategy == "zorder" and policy.columns == ("payload_id", "sensor_kind")
    assert config.policy("other.table").enabled and config.policy("other.table").strategy is None


def test_token_is_never_in_repr(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    config = load_config(environ={"LAKEFMT_SERVICE_TOKEN_FILE": str(token_file)})
    assert config.token == "s3cret-token" and config.auth_enabled
    assert "s3cret" not in repr(config)
    assert load_config(environ={"LAKEFMT_SERVICE_TOKEN": "abc"}).token == "abc"


@pytest.mark.parametrize(("text", "env", "fragment"), [
    ("[nope]\n", {}, "unknown section"),
    ("[service]\nprot = 1\n", {}, "unknown key"),
    ("[compaction]\nschedul = '5 * * * *'\n", {}, "unknown key"),
    ("[compaction]\nschedule = '61 * * * *'\n", {}, r"\[compaction\] schedule: '61 \* \* \* \*'"),
    ("[service]\nport = 'eighty'\n", {}, "port"),
    ("[service]\nport = 70000\n", {}, "not a TCP port"),
    ("[service]\nmax_concurrent_jobs = 0\n", {}, "max_concurrent_jobs"),
    ("[compaction]\nstrategy = 'fast'\n", {}, "strategy"),
    ("[expire]\nolder_than = 'a week'\n", {}, "older_than"),
    ("[table.'a.b']\ncolour = 'red'\n", {}, "unknown key"),
    ("", {"LAKEFMT_COMPACTION_ENABLED": "maybe"}, "enabled"),
    ("[service\n", {}, "not valid TOML"),
])
def test_bad_configuration_is_refused_naming_the_key(tmp_path, text, env, fragment):
    with pytest.raises(ValidationError, match=fragment):
        load_config(write(tmp_path, text), environ=env)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ValidationError, match="does not exist"):
        load_config(tmp_path / "absent.toml")


def test_ages():
    assert parse_seconds("7d", "x") == 7 * 86400 and parse_seconds("90m", "x") == 5400
    assert parse_seconds(12, "x") == 12.0 and parse_seconds("30", "x") == 30.0
    assert isinstance(ServiceConfig(), ServiceConfig)


def test_the_readme_configuration_loads(tmp_path):
    """The README's sample lakefmt.toml is a valid configuration (so the front page cannot drift)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [sample] = re.findall(r"```toml\n(.*?)```", readme, re.DOTALL)
    config = load_config(write(tmp_path, sample), environ={})
    assert config.include == ("artemis.*",) and config.expire.enabled and config.expire.older_than == "7d"


def test_serve_refuses_bad_setups_before_starting(tmp_path, capsys, monkeypatch):
    """`lakefmt serve` exits 2 with one error line: no catalog, missing or bad config."""
    from lakefmt.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--warehouse", str(tmp_path / "nowhere")]) == 2
    assert "no lakefmt catalog" in capsys.readouterr().err
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = write(tmp_path, "[service]\ntoken = ['s3cret']\n")
    assert main(["serve", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "token" in err and "s3cret" not in err  # SERVICE-11: not even a malformed token is echoed


@pytest.mark.parametrize(("text", "env", "fragment"), [
    ("", {"LAKEFMT_SERVICE_TOKEN": ""}, r"token is empty \(LAKEFMT_SERVICE_TOKEN\)"),
    ("", {"LAKEFMT_SERVICE_TOKEN": "   "}, r"token is empty \(LAKEFMT_SERVICE_TOKEN\)"),
    ("[service]\ntoken = ''\n", {}, r"token is empty \(\[service\] token\)"),
    ("", {"LAKEFMT_SERVICE_TOKEN_FILE": ""}, "token_file is empty"),
])
def test_an_empty_token_is_a_configuration_error(tmp_path, text, env, fragment):
    """SERVICE-29: an empty token never means 'no authentication'."""
    with pytest.raises(ValidationError, match=fragment):
        load_config(write(tmp_path, text), environ=env)


def test_an_empty_token_file_is_refused(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    with pytest.raises(ValidationError, match="is empty: write the token into it"):
        load_config(environ={"LAKEFMT_SERVICE_TOKEN_FILE": str(token_file)})
    assert load_config(environ={"LAKEFMT_SERVICE_TOKEN": "none"}).token == "none"  # taken as written


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("192.0.2.1", False),
])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_no_token_on_a_non_loopback_address_needs_insecure():
    """SERVICE-29: without a token only loopback is served, unless insecure is set."""
    check_exposure(load_config(environ={}, host="127.0.0.1"))
    check_exposure(load_config(environ={"LAKEFMT_SERVICE_TOKEN": "t0k"}, host="0.0.0.0"))
    with pytest.raises(ValidationError, match="refusing to serve without a token on '0.0.0.0'") as info:
        check_exposure(load_config(environ={}, host="0.0.0.0"))
    assert "--insecure" in str(info.value) and "LAKEFMT_SERVICE_TOKEN" in str(info.value)
    check_exposure(load_config(environ={"LAKEFMT_SERVICE_INSECURE": "true"}, host="0.0.0.0"))
    check_exposure(load_config(environ={}, host="::", insecure=True))


def test_a_config_built_in_code_with_an_empty_token_is_refused_before_serving():
    with pytest.raises(ValidationError, match="token is empty"):
        check_exposure(ServiceConfig(token=""))
