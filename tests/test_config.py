"""Run configs: shipped YAMLs validate, overrides apply, bad input names file and key."""

from __future__ import annotations

import pytest

from finmbs.config import ConfigError, RunConfig, load_config
from finmbs.resources import resource_dir


@pytest.mark.parametrize("name", ["default.yaml", "paper-finance.yaml", "paper-math.yaml"])
def test_shipped_configs_validate(name):
    config = load_config(resource_dir("configs") / name)
    assert isinstance(config, RunConfig)
    assert config.stages.alpha_leaf == 0.8 and config.stages.alpha_parent == 0.625


def test_paper_defaults():
    stages = load_config(resource_dir("configs") / "paper-math.yaml").stages
    assert (stages.N, stages.K, stages.Nd, stages.D, stages.R, stages.Nc, stages.L) == (8, 3, 3, 3, 3, 10, 16384)


def test_default_runs_embedded_everywhere():
    config = load_config()
    assert set(config.embedded_roles()) == {"teacher", "student", "target", "judge"}


def test_overrides():
    config = load_config(overrides=["stages.N=2", "roles.teachers.0.temperature=0.1", "budget.max_cost_usd=5"])
    assert config.stages.N == 2
    assert config.roles.teachers[0].temperature == 0.1
    assert config.budget.max_cost_usd == 5


def test_invalid_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("roles:\n  teachers: [\n  - x\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(bad) in str(err.value) and "line" in str(err.value)


def test_bad_value_names_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (resource_dir("configs") / "default.yaml").read_text().replace("N: 4,", "N: -1,")
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert "stages.N" in str(err.value) and str(bad) in str(err.value)


def test_unknown_key_rejected(tmp_path):
    with pytest.raises(ConfigError, match="stages.Nx"):
        load_config(overrides=["stages.Nx=3"])


def test_missing_key_env(monkeypatch):
    monkeypatch.delenv("FINMBS_NOPE", raising=False)
    config = load_config(overrides=["roles.judge.api_key_env=FINMBS_NOPE"])
    with pytest.raises(ConfigError, match="FINMBS_NOPE"):
        config.roles.judge.api_key()


def test_env_reference_in_api_base(monkeypatch):
    config = load_config(resource_dir("configs") / "paper-math.yaml")
    monkeypatch.delenv("TARGET_API_BASE", raising=False)
    with pytest.raises(ConfigError, match="TARGET_API_BASE"):
        config.roles.target.base_url()
    monkeypatch.setenv("TARGET_API_BASE", "http://10.0.0.5:8000/v1")
    assert config.roles.target.base_url() == "http://10.0.0.5:8000/v1"


def test_unknown_role():
    with pytest.raises(ConfigError, match="unknown role"):
        load_config().roles.endpoint("nobody")
