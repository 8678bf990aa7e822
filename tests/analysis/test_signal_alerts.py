"""Alerts for what happened: each interruption with its cause, where and what to try
(resolved once recovered), the slow training signals, the `[alerts]` thresholds file,
and acknowledgement. Interruption events are shaped as the agent writes them
(`agent.job.managed`, `agent.job.recovery.Diagnosis.as_dict`): GPU-side causes cannot be caused on
these CPUs; the CPU-side ones are also checked on the demo's real crash (tests/e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.analysis import alert_config
from cockpit.analysis.alert_config import AlertConfigError, load_alert_config
from cockpit.analysis.signal_alerts import (
    acknowledge,
    grad_norm_alerts,
    interruption_alerts,
    loss_scale_alerts,
    micro_batch_to_try,
    plateau_alerts,
)
from cockpit.snapshot import Interruption, Series

GIB = 2**30


def _interruption(ts: float, cause: str, *, host: str = "node-a", step: int = 120,
                  where: dict | None = None, retry: bool = True,
                  evidence: str = "boom") -> dict:
    return {"kind": "interruption", "host": host, "job": "j", "ts": ts, "step": step,
            "data": {"cause": cause, "evidence": [evidence], "where": where or {},
                     "detected_at": ts, "decision": {"retry": retry, "reason": "policy"}}}


def _incident(ts: float, host: str = "node-a", recovered: bool = True) -> Interruption:
    return Interruption(cause="x", detected_at=ts, recovered_in=5.0 if recovered else None,
                        steps_lost=3, hosts=(host,))


def test_an_oom_names_the_micro_batch_to_try_from_the_memory_reached() -> None:
    events = [_interruption(100.0, "oom", where={"rank": 3, "gpu": 1},
                            evidence="torch.OutOfMemoryError: CUDA out of memory")]
    [alert] = interruption_alerts(events, [_incident(100.0, recovered=False)], now=200.0,
                                  micro_batch=16, memory={"node-a": (79 * GIB, 80 * GIB)})
    assert (alert.code, alert.kind, alert.state, alert.severity) == (
        "interrupted_oom", "resource", "active", "critical")
    assert alert.where == "host node-a / gpu 1 / rank 3 / step 120"
    assert "out of GPU memory" in alert.what and "CUDA out of memory" in alert.what
    # 16 × 0.85 × 80 / 79 = 13.77: 13 fits with the headroom.
    assert "try a micro-batch of 13 per rank (now 16)" in alert.hint
    assert "reached 79.0 of 80.0 GiB" in alert.hint


def test_an_alerts_code_is_an_identifier_whatever_cause_a_host_names() -> None:
    """The agent's and Slurm's causes are words and stay so; a cause a host wrote as a
    sentence (or as markup, or a control sequence) is made a word for the code, and the
    alert's text still says it."""
    events = [_interruption(1.0, "slurm_node_fail"),
              _interruption(2.0, "rank 11 killed (SIGKILL)", host="b"),
              _interruption(3.0, "[red]x\x1b[2J", host="c"),
              _interruption(4.0, "?!", host="d")]
    codes = [a.code for a in interruption_alerts(events, [], now=5.0)]
    assert codes == ["interrupted_slurm_node_fail", "interrupted_rank_11_killed_sigkill",
                     "interrupted_red_x_2j", "interrupted_unknown"]
    (alert,) = interruption_alerts(events[1:2], [], now=5.0)
    assert "rank 11 killed (SIGKILL)" in alert.what


def test_micro_batch_arithmetic() -> None:
    assert micro_batch_to_try(16, 40 * GIB, 80 * GIB, 0.85) == 15  # never the same size
    assert micro_batch_to_try(8, 80 * GIB, 80 * GIB, 0.5) == 4
    assert micro_batch_to_try(1, 80 * GIB, 80 * GIB, 0.85) is None
    assert micro_batch_to_try(None, 80 * GIB, 80 * GIB, 0.85) is None


def test_a_bad_input_names_the_shard_and_a_recovered_one_is_resolved() -> None:
    events = [_interruption(50.0, "data", where={"rank": 0, "file": "/data/shard-007.bin",
                                                 "range": "1200-1299"})]
    [alert] = interruption_alerts(events, [_incident(50.0)], now=90.0)
    assert alert.kind == "data" and alert.state == "resolved"
    assert "inspect shard /data/shard-007.bin (records 1200-1299)" in alert.hint
    assert "file /data/shard-007.bin / range 1200-1299" in alert.where


def test_repeats_fold_into_one_alert_with_first_and_last_seen() -> None:
    events = [_interruption(10.0, "killed", where={"rank": 1}),
              _interruption(60.0, "killed", where={"rank": 1}, step=300),
              _interruption(70.0, "nccl", host="node-b")]
    alerts = {a.code: a for a in interruption_alerts(
        events, [_incident(10.0), _incident(60.0), _incident(70.0, "node-b")], now=99.0)}
    killed = alerts["interrupted_killed"]
    assert (killed.ts, killed.last_seen) == (10.0, 60.0)
    assert "stopped 2 times," in killed.what and "step 300" in killed.where
    assert "dmesg" in killed.hint
    assert alerts["interrupted_nccl"].where == "host node-b / step 120"


def test_a_host_the_agent_gave_up_on_stays_active() -> None:
    events = [_interruption(10.0, "user_code", retry=False,
                            evidence="ValueError: bad config")]
    [alert] = interruption_alerts(events, [_incident(10.0, recovered=False)], now=20.0)
    assert alert.state == "active" and "the agent stopped retrying" in alert.what
    assert alert.kind == "parameter" and "traceback" in alert.hint


def test_an_elastic_exclusion_is_no_interruption_alert() -> None:
    event = _interruption(10.0, "gpu_fault")
    event["data"]["exclusion"] = {"host": "node-a"}
    assert interruption_alerts([event], [], now=20.0) == []


def _series(values: list[float | None]) -> Series:
    return Series(x=tuple(float(i * 10) for i in range(len(values))), last=tuple(values))


def test_loss_scale_collapse() -> None:
    [alert] = loss_scale_alerts(_series([65536.0, 65536.0, 4096.0, 512.0]), now=1.0)
    assert alert.code == "loss_scale_collapse" and alert.where == "step 30"
    assert "from 65536 (step 0) to 512" in alert.what  # the first time it peaked
    assert loss_scale_alerts(_series([65536.0, 32768.0, 65536.0]), now=1.0) == []
    assert len(loss_scale_alerts(_series([8.0, 2.0, 1.0]), now=1.0)) == 1  # at its floor


def test_grad_norm_explosion() -> None:
    calm = [1.0, 1.1, 0.9, 1.0, 1.2, 1.0]
    [alert] = grad_norm_alerts(_series([*calm, 25.0]), now=1.0)
    assert alert.code == "grad_norm_explosion" and "25×" in alert.what
    assert "clipping" in alert.hint
    assert grad_norm_alerts(_series([*calm, 3.0]), now=1.0) == []


def test_plateau() -> None:
    flat = [2.0 - 0.0001 * i for i in range(40)]
    [alert] = plateau_alerts(_series(flat), now=1.0)
    assert alert.code == "loss_plateau" and alert.severity == "info"
    falling = [2.0 - 0.02 * i for i in range(40)]
    assert plateau_alerts(_series(falling), now=1.0) == []


def test_acknowledged_alerts_read_so_and_resolved_ones_stay_resolved() -> None:
    active, = interruption_alerts([_interruption(1.0, "hang")],
                                  [_incident(1.0, recovered=False)], now=2.0)
    resolved, = interruption_alerts([_interruption(1.0, "killed", host="b")],
                                    [_incident(1.0, "b")], now=2.0)
    keys = {(active.code, active.where), (resolved.code, resolved.where)}
    assert [a.state for a in acknowledge([active, resolved], keys)] == [
        "acknowledged", "resolved"]


def test_the_alerts_table_sets_thresholds_and_rules_read_them(tmp_path: Path) -> None:
    path = tmp_path / "cockpit.toml"
    path.write_text("[theme]\nname = 'x'\n\n[alerts]\ngrad_norm_explosion = 2.5\n"
                    "plateau_points = 5\n")
    thresholds = load_alert_config(path)
    assert (thresholds.grad_norm_explosion, thresholds.plateau_points) == (2.5, 5)
    assert thresholds.disk_warn == 0.90  # the rest keep their defaults
    alert_config.configure(thresholds)
    try:
        assert grad_norm_alerts(_series([1.0, 1.0, 1.0, 1.0, 1.0, 3.0]), now=1.0)
    finally:
        alert_config.configure(alert_config.AlertThresholds())
    assert grad_norm_alerts(_series([1.0, 1.0, 1.0, 1.0, 1.0, 3.0]), now=1.0) == []


@pytest.mark.parametrize(("body", "message"), [
    ("[alerts]\ndisk_warn = 0.9\ndisk_wran = 0.8\n", ":3: alerts.disk_wran is not a threshold"),
    ("[alerts]\n\ndisk_warn = 90\n", ":3: alerts.disk_warn = 90 is out of range (0 to 1)"),
    ("[alerts]\nplateau_points = 2.5\n", ":2: alerts.plateau_points must be an integer"),
    ("[alerts]\nmemory_warn = 'high'\n", ":2: alerts.memory_warn must be a number, got str"),
    ("[alerts]\ndisk_warn = 0.95\ndisk_critical = 0.9\n",
     ":3: alerts.disk_critical must not be below alerts.disk_warn"),
    ("[other]\nx = 1\n", ": no [alerts] table"),
    ("[alerts\n", ": not valid TOML"),
])
def test_a_wrong_alerts_table_names_file_line_and_key(tmp_path: Path, body: str,
                                                      message: str) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text(body)
    with pytest.raises(AlertConfigError) as caught:
        load_alert_config(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)


def test_the_documented_table_is_the_defaults(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "doc.toml"
    path.write_text(block)
    assert load_alert_config(path) == alert_config.AlertThresholds()


def test_a_hosts_odd_interruption_data_costs_only_itself() -> None:
    """`data` is a host's free-form dict: wrong types fall back, never break the read."""
    event = _interruption(10.0, "data")
    event["data"].update({"detected_at": "soon", "where": {"rank": {"x": 1}, "gpu": True,
                                                          "file": ["a"]},
                          "evidence": None})
    [alert] = interruption_alerts([event], [], now=20.0)
    assert alert.ts == 10.0 and alert.where == "host node-a / step 120"
    assert alert.what == "the job stopped from a bad input at step 120"
