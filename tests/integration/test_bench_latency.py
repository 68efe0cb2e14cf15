"""`ketch bench latency` end to end on a small in-process cluster (real controller, brokers,
TCP), plus the load generator's coordinated-omission correction and the argument checks; with
--protocol kafka through real Kafka clients (confluent-kafka, aiokafka) on a process cluster's
Kafka listeners, and with --peer-cmd against a second ketch as the peer broker.

The benchmark measures wall-clock latency by design, so its runs use the system clock; the
assertions are on the shape of what it writes and on counts the schedule fixes, never on how
fast this machine is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from bench import latency
from bench.latency_kafka_peer import (
    NATIVE_OFFSETS,
    PeerError,
    free_base_port,
    peer_broker,
    template_problem,
)
from bench.latency_report import PeerReport, ScenarioResult, new_histogram
from bench.latency_scenarios import Load, closed_loop, now_ns, open_loop

SCENARIO_KEYS = {
    "name",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "count",
    "throughput_msgs_s",
}


def _run(tmp_path: Path, *flags: str) -> tuple[dict[str, object], Path]:
    out_json = tmp_path / "out.json"
    out_png = tmp_path / "out.png"
    code = latency.main(["--in-process", "--json", str(out_json), "--plot", str(out_png), *flags])
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    assert set(document) == {"config", "scenarios"}, document
    return document, out_png


def _check_outputs(
    document: dict[str, object],
    png: Path,
    names: list[str],
    may_be_empty: frozenset[str] = frozenset(),
) -> None:
    scenarios = document["scenarios"]
    assert isinstance(scenarios, list)
    assert [s["name"] for s in scenarios] == names
    for scenario in scenarios:
        assert set(scenario) >= SCENARIO_KEYS, scenario
        if scenario["name"] in may_be_empty and scenario["count"] == 0:
            assert scenario["throughput_msgs_s"] == 0, scenario
            continue
        assert scenario["count"] > 0, scenario
        assert scenario["throughput_msgs_s"] > 0, scenario
        percentiles = [scenario[k] for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
        assert percentiles == sorted(percentiles), scenario
        assert percentiles[0] > 0, scenario
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    for name in names:
        hlog = png.with_name(f"out.{name}.hlog")
        # The log reads back as HdrHistogram's format with the scenario's whole sample: one
        # interval line "start,length,max,base64 histogram" after the comments and legend.
        lines = [line for line in hlog.read_text().splitlines() if line[:1].isdigit()]
        assert len(lines) == 1, (hlog, lines)
        histogram = HdrHistogram.decode(lines[0].rsplit(",", 1)[1])
        count = next(s["count"] for s in scenarios if s["name"] == name)
        assert histogram.get_total_count() == count, (name, count)


def test_acks_open_loop_run_writes_json_plot_and_logs(tmp_path: Path) -> None:
    document, png = _run(tmp_path, "--acks", "1", "--rate", "300", "--duration", "1.5")
    _check_outputs(
        document, png, ["floor", "floor_asyncio", "floor_process", "produce_acks1", "e2e"]
    )
    # Open loop keeps the schedule: every request due in the 0.5 s window (1.5 s over 2
    # cluster scenarios and the floors) is counted, however slow the machine.
    counts = {s["name"]: s["count"] for s in document["scenarios"]}  # type: ignore[attr-defined]
    assert counts["produce_acks1"] == counts["e2e"] == 150, counts
    config = document["config"]
    assert isinstance(config, dict)
    assert config["acks"] == "1"
    assert config["rate"] == 300
    assert config["cluster"] == "in-process"
    assert config["coordinated_omission_correction"] is not None
    assert config["replication_factor"] == 3
    assert config["min_insync_replicas"] == 2


def test_full_closed_loop_run_has_every_scenario(tmp_path: Path) -> None:
    document, png = _run(tmp_path, "--duration", "2", "--loop", "asyncio", "--size", "200")
    names = [
        "floor",
        "floor_uvloop",
        "floor_process",
        "produce_acks0",
        "produce_acks1",
        "produce_acks_all",
        "e2e",
        "throughput_acks1",
        "throughput_acks_all",
    ]
    # A quarter second per scenario: with thousands of 16 KB-batched records in flight,
    # acks=all on one shared event loop may acknowledge none within it (its p50 is ~0.6 s).
    _check_outputs(document, png, names, may_be_empty=frozenset({"throughput_acks_all"}))
    scenarios = {s["name"]: s for s in document["scenarios"]}  # type: ignore[attr-defined]
    for name in ("throughput_acks1", "throughput_acks_all"):
        figures = scenarios[name]
        # MB/s is the acknowledged value bytes: 200 B per counted message.
        expected = figures["throughput_msgs_s"] * 200 / 1e6
        assert figures["throughput_mb_s"] == pytest.approx(expected, rel=0.01, abs=0.01)
    assert document["config"]["mode"] == "closed-loop"  # type: ignore[index]


@pytest.mark.slow
def test_process_cluster_run(tmp_path: Path) -> None:
    """The default path: a controller and 3 brokers as child processes (slow to start: each
    imports the runtime), measured with acks=all; the children are stopped afterwards."""
    out_json = tmp_path / "out.json"
    code = latency.main(["--acks", "all", "--duration", "1", "--json", str(out_json)])
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    assert document["config"]["cluster"] == "processes"
    names = [s["name"] for s in document["scenarios"]]
    assert names == ["floor", "floor_asyncio", "floor_process", "produce_acks_all", "e2e"]
    assert all(s["count"] > 0 for s in document["scenarios"]), document


async def test_open_loop_charges_a_stall_to_every_request_due_during_it() -> None:
    """A 50 ms stall of the client's loop: the requests due meanwhile are sent late and each is
    charged from its intended time, and none of the schedule's requests is dropped."""
    load = Load(duration_s=0.3, warmup_s=0.05, rate=1_000, size_bytes=0)
    stall_at = now_ns() + 150_000_000  # inside the measured window
    stalled = False

    async def step(_intended: int) -> int:
        nonlocal stalled
        if not stalled and now_ns() >= stall_at:
            stalled = True
            time.sleep(0.05)  # the stall under test: the whole loop is blocked  # noqa: ASYNC251
        await asyncio.sleep(0)
        return now_ns()

    window = await open_loop(step, load)
    assert stalled
    assert window.histogram.get_total_count() == 300  # duration x rate, all of them
    slow: int = sum(
        item.count_added_in_this_iter_step
        for item in window.histogram.get_recorded_iterator()
        if item.value_iterated_to >= 10_000_000
    )
    # ~50 requests fell due in the stall; each waited from its due time to the stall's end.
    assert slow >= 30, slow


async def test_closed_loop_measures_from_the_actual_send() -> None:
    load = Load(duration_s=0.05, warmup_s=0.01, rate=None, size_bytes=0)

    async def step(intended: int) -> int:
        await asyncio.sleep(0)
        return intended + 2_000_000  # every request "takes" exactly 2 ms

    window = await closed_loop(step, load)
    count = window.histogram.get_total_count()
    assert count > 0
    # Every sample is 2 ms, up to the histogram's 3 significant digits.
    assert window.histogram.get_min_value() >= 1_998_000
    assert window.histogram.get_max_value() <= 2_002_000


@pytest.mark.parametrize(
    "flags",
    [
        ["--duration", "0"],
        ["--rate", "-5"],
        ["--brokers", "0"],
        ["--size", "-1"],
        ["--bootstrap", "127.0.0.1:1", "--in-process"],
        ["--protocol", "kafka", "--in-process"],
        ["--peer-cmd", "kafka-server --port {port}"],  # needs --protocol kafka
        ["--protocol", "kafka", "--peer-cmd", "kafka-server"],  # no {port}
        ["--protocol", "kafka", "--peer-cmd", "kafka-server {port} {host}"],
        ["--protocol", "kafka", "--peer-cmd", "kafka-server {port"],
    ],
)
def test_bad_arguments_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert latency.main(flags) == latency.EXIT_USAGE
    assert "ketch bench latency:" in capsys.readouterr().err


def test_unreachable_bootstrap_fails_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    code = latency.main(["--bootstrap", "127.0.0.1:1", "--duration", "0.2", "--acks", "1"])
    assert code == latency.EXIT_FAILED
    assert "failed" in capsys.readouterr().err


def test_register_adds_bench_latency_with_a_handler() -> None:
    parser = argparse.ArgumentParser(prog="ketch")
    latency.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "latency", "--acks", "all", "--rate", "50"])
    assert args.handler is latency.run
    assert args.acks == "all"
    assert args.rate == 50


# -- --protocol kafka and --peer-cmd -----------------------------------------------------------

KAFKA_NAMES = [
    f"{base}[{client}]"
    for base in (
        "produce_acks0",
        "produce_acks1",
        "produce_acks_all",
        "e2e",
        "throughput_acks1",
        "throughput_acks_all",
    )
    for client in ("confluent", "aiokafka")
]


def test_kafka_protocol_run_drives_every_scenario_with_both_clients(tmp_path: Path) -> None:
    """A process cluster with Kafka listeners; every cluster scenario once per client, each with
    records counted; the floors stay; the clients' settings are in the config."""
    out_json = tmp_path / "out.json"
    code = latency.main(["--protocol", "kafka", "--duration", "3", "--json", str(out_json)])
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    assert set(document) == {"config", "scenarios"}, document
    names = [s["name"] for s in document["scenarios"]]
    assert names == ["floor", "floor_asyncio", "floor_process", *KAFKA_NAMES], names
    for scenario in document["scenarios"]:
        assert set(scenario) >= SCENARIO_KEYS, scenario
        assert scenario["count"] > 0, scenario
        assert scenario["p50_us"] <= scenario["p99_us"] <= scenario["max_us"], scenario
    config = document["config"]
    assert config["protocol"] == "kafka"
    assert config["cluster"] == "processes"
    assert config["peer_cmd"] is None
    assert (config["replication_factor"], config["min_insync_replicas"]) == (3, 2)
    confluent = config["kafka_clients"]["confluent"]
    assert confluent["latency_producer"]["linger.ms"] == 0
    assert confluent["throughput_producer"]["linger.ms"] == 5
    assert confluent["latency_producer"]["enable.idempotence"] is False
    assert confluent["latency_producer"]["compression.type"] == "none"
    aiokafka = config["kafka_clients"]["aiokafka"]
    assert aiokafka["latency_producer"]["linger_ms"] == 0
    assert aiokafka["throughput_producer"]["max_batch_size"] == 16_384
    assert aiokafka["consumer"]["group_id"] is None


@pytest.mark.slow
def test_peer_cmd_run_measures_a_second_ketch_and_prints_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second ketch (`ketch up` on the bench's ports) as the peer, open loop: the peer section
    has the same scenarios with the same schedule (so the same counts), one ratio row per
    scenario, each ratio the quotient of the two sides' figures, and the plot's logs include
    the peer's."""
    out_json = tmp_path / "out.json"
    out_png = tmp_path / "out.png"
    peer_cmd = (
        f"{sys.executable} -m cli.main up --brokers 3 --port {{native_port}} "
        "--kafka-port {port} --data-dir {dir}"
    )
    code = latency.main(
        [
            "--protocol", "kafka", "--acks", "1", "--duration", "1.8", "--rate", "200",
            "--peer-cmd", peer_cmd, "--json", str(out_json), "--plot", str(out_png),
        ]
    )  # fmt: skip
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    names = [f"{base}[{c}]" for base in ("produce_acks1", "e2e") for c in ("confluent", "aiokafka")]
    assert [s["name"] for s in document["scenarios"]] == [
        "floor",
        "floor_asyncio",
        "floor_process",
        *names,
    ]
    peer = document["peer"]
    assert peer["command"].startswith(sys.executable), peer
    assert "{" not in peer["command"], peer  # every placeholder filled
    assert (peer["brokers"], peer["replication_factor"], peer["min_insync_replicas"]) == (3, 3, 2)
    assert [s["name"] for s in peer["scenarios"]] == names
    ours = {s["name"]: s for s in document["scenarios"]}
    theirs = {s["name"]: s for s in peer["scenarios"]}
    for name in names:
        # 200/s over a 0.2 s share (1.8 s over 8 runs and the floors): ~40 each, on both sides.
        assert 30 <= ours[name]["count"] == theirs[name]["count"] <= 50, (ours, theirs)
        assert _exists(out_png.with_name(f"out.peer-{name}.hlog")), name
    assert [r["name"] for r in peer["ratios"]] == names
    for ratio in peer["ratios"]:
        name = ratio["name"]
        for key, figure in (
            ("p50_ratio", "p50_us"),
            ("p99_ratio", "p99_us"),
            ("throughput_ratio", "throughput_msgs_s"),
        ):
            expected = theirs[name][figure] / ours[name][figure]
            assert ratio[key] == pytest.approx(expected, abs=0.001), (name, key)
    out = capsys.readouterr().out
    assert "peer vs ketch" in out
    assert "produce_acks1[confluent]" in out  # not swallowed as a style tag


def test_peer_template_problems() -> None:
    assert template_problem("kafka --port {port} --dir {dir} --base {native_port}") is None
    assert "{port}" in (template_problem("kafka --dir {dir}") or "")
    assert "host" in (template_problem("kafka {port} {host}") or "")
    assert template_problem("kafka {port") is not None


def test_free_base_port_leaves_every_offset_free() -> None:
    import socket

    base = free_base_port(NATIVE_OFFSETS)
    with contextlib.ExitStack() as held:
        for offset in NATIVE_OFFSETS:
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", base + offset))  # raises if taken


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_peer_broker_fills_placeholders_and_kills_its_whole_group(tmp_path: Path) -> None:
    """A stand-in peer: a shell that leaves a background process behind and execs a listener on
    {port}; the probe (in place of a Kafka client) answers once the port accepts. On the way out
    the peer's whole process group is gone, the background process included."""
    listener = tmp_path / "listener.py"
    listener.write_text(
        "import socket, sys, time\n"
        "s = socket.socket()\n"
        "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen()\n"
        "time.sleep(600)\n"
    )
    probes: list[str] = []

    async def probe(bootstrap: str) -> int:
        probes.append(bootstrap)
        return 1

    notes = tmp_path / "notes"
    template = (
        f"echo {{dir}} > {notes}.dir; sleep 600 & echo $! > {notes}.bg; "
        f"exec {sys.executable} {listener} {{port}}"
    )
    async with peer_broker(template, probe, want_brokers=1) as peer:
        data_dir, background = _read_notes(notes)
        port = int(peer.bootstrap.rpartition(":")[2])
        filled = template.replace("{port}", str(port)).replace("{dir}", str(data_dir))
        assert peer.command == filled
        assert probes[-1] == peer.bootstrap
        assert peer.brokers == 1
        assert _alive(peer.pid)
        assert _alive(background)
    assert not _alive(peer.pid)
    assert not _alive(background)
    assert not _exists(data_dir)


def _read_notes(notes: Path) -> tuple[Path, int]:
    return (
        Path(notes.with_suffix(".dir").read_text().strip()),
        int(notes.with_suffix(".bg").read_text()),
    )


def _exists(path: Path) -> bool:
    return path.exists()


async def test_peer_that_exits_fails_with_its_output() -> None:
    async def probe(_bootstrap: str) -> int:
        raise AssertionError("never reached: nothing listens")

    with pytest.raises(PeerError, match="exited with 3") as caught:
        async with peer_broker("echo cannot start on {port} >&2; exit 3", probe, want_brokers=1):
            pass
    assert "cannot start on" in str(caught.value)


def _result(name: str, latencies_us: list[int], elapsed_s: float) -> ScenarioResult:
    histogram = new_histogram()
    for value in latencies_us:
        histogram.record_value(value * 1000)
    return ScenarioResult(name, name, histogram, elapsed_s, 0.0)


def test_peer_ratios_are_peer_over_ketch_per_scenario() -> None:
    ketch = [_result("e2e[aiokafka]", [100] * 99 + [1000], 1.0)]
    peer = PeerReport(
        "cmd",
        "127.0.0.1:1",
        1,
        1,
        1,
        [_result("e2e[aiokafka]", [300] * 99 + [4000], 2.0), _result("only-peer", [1], 1.0)],
    )
    [ratio] = peer.ratios(ketch)
    assert ratio["name"] == "e2e[aiokafka]"
    assert ratio["p50_ratio"] == pytest.approx(3.0, rel=0.01)
    assert ratio["p99_ratio"] == pytest.approx(3.0, rel=0.01)  # p99 of 100 samples: the 99th
    assert ratio["throughput_ratio"] == pytest.approx(0.5)  # 100 in 2 s against 100 in 1 s
