"""The agentledger command: demo, runs, show, state, replay, export, and its error messages."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentledger.cli import main
from agentledger.core import decode_event


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the demo into a SQLite store in a temporary directory; return the run id."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTLEDGER_STORE", raising=False)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "agentledger.db").exists()
    run_line = next(line for line in out.splitlines() if line.startswith("run "))
    return run_line.split()[1].rstrip(":")


def test_demo_records_and_runs_lists(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo is recorded in agentledger.db and `runs` lists it with its outcome."""
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert recorded in out
    assert "TripPlanner" in out
    assert "completed" in out


def test_show_draws_the_timeline(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show` prints iterations with the tools offered, calls, short-circuits and session changes."""
    assert main(["show", recorded]) == 0
    out = capsys.readouterr().out
    assert (
        "model call 3: offered ['get_weather', 'remember_preference', 'load_booking_tools', 'book_hotel']"
        in out
    )
    assert "middleware require_positive_nights answered" in out
    assert "session updated by call_2" in out
    assert "tools added: ['book_hotel']" in out


def test_state_at_a_seq(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`state --at` prints the folded state as JSON."""
    assert main(["state", recorded, "--at", "12"]) == 0
    state = msgspec.json.decode(capsys.readouterr().out)
    assert state["seq"] == 12
    assert [t["name"] for t in state["tools"]][-1] == "book_hotel"
    assert state["session"] == {"preferences": {"room": "quiet"}}


def test_state_outside_the_log(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An --at beyond the log is a usage error with the valid range."""
    assert main(["state", recorded, "--at", "999"]) == 2
    assert "events 0..23" in capsys.readouterr().err


def test_replay_reports_no_divergence(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Replaying the demo against the demo's code finds no divergence."""
    assert main(["replay", recorded]) == 0
    assert "no divergence" in capsys.readouterr().out


def test_replay_exit_code_on_divergence(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Replaying against changed code exits 1 and prints where and how it diverged."""
    assert main(["replay", recorded, "--agent", "tests.cli_agents:changed_demo", "--tools", "live"]) == 1
    out = capsys.readouterr().out  # the report, on stdout like any command's output
    assert "diverged at seq " in out
    assert "rain, 9°C" in out


def test_export_jsonl_round_trips(recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --format jsonl` writes one decodable event per line."""
    target = tmp_path / "out.jsonl"
    assert main(["export", recorded, "--format", "jsonl", "-o", str(target)]) == 0
    events = [decode_event(line) for line in target.read_bytes().splitlines()]
    assert [e.seq for e in events] == list(range(24))
    assert events[0].run_id == recorded


def test_missing_store_is_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store path that does not exist gives one line on stderr and exit code 2."""
    assert main(["runs", "--store", str(tmp_path / "none.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: no event store at")
    assert "Traceback" not in err


def test_unknown_run(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Showing a run the store lacks names it."""
    assert main(["show", "run_nope"]) == 2
    assert "no run 'run_nope'" in capsys.readouterr().err


def test_corrupt_log_is_reported_with_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt JSONL log is reported with the file and line, not a traceback (`runs` reads only
    the first and last record of each run, so the run read here is shown)."""
    store = tmp_path / "runs.jsonl"
    assert main(["demo", "--store", str(store)]) == 0
    capsys.readouterr()
    lines = store.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b'"seq":3', b'"seq":"three"')
    store.write_bytes(b"".join(lines))
    code = main(["show", "run_", "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 1
    assert "runs.jsonl:4:" in err  # file:line
    assert "Traceback" not in err


def test_view_writes_a_self_contained_page(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`view` writes one HTML file holding the run, with no network references."""
    target = tmp_path / "run.html"
    assert main(["view", recorded, "-o", str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    page = target.read_text(encoding="utf-8")
    assert recorded in page
    assert "book_hotel" in page
    assert "http://" not in page.replace("http://www.w3.org", "")


def test_export_otlp_file(recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --otlp-file` writes the Collector's JSON format: one request with the run's spans."""
    target = tmp_path / "traces.jsonl"
    assert main(["export", recorded, "--otlp-file", str(target)]) == 0
    [line] = target.read_bytes().splitlines()
    request = msgspec.json.decode(line)
    spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    names = [s["name"] for s in spans]
    assert "invoke_agent TripPlanner" in names
    assert names.count("execute_tool book_hotel") == 2
    assert f"wrote {len(spans)} spans" in capsys.readouterr().out


def test_export_otlp_to_a_receiver(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --otlp URL` posts the spans to a receiver on loopback, with the given headers."""
    import http.server
    import threading

    received: list[tuple[str, dict[str, str], bytes]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the OTLP/HTTP receiver side
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, dict(self.headers), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code = main(
            ["export", recorded, "--otlp", url, "--otlp-encoding", "json", "--header", "X-Team: ledger"]
        )
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    [(path, headers, body)] = received
    assert path == "/v1/traces"
    assert headers["X-Team"] == "ledger"
    assert headers["Content-Type"] == "application/json"
    spans = msgspec.json.decode(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert "exported" in capsys.readouterr().out
    assert any(s["name"] == "invoke_agent TripPlanner" for s in spans)


def test_export_bad_header(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed --header is a usage error."""
    assert main(["export", recorded, "--otlp", "http://127.0.0.1:9", "--header", "nocolon"]) == 2
    assert "Name: value" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["state", "replay", "view", "show", "export"])
def test_unknown_run_is_a_usage_error_everywhere(
    recorded: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command that takes a run answers an unknown one with exit code 2 and one line."""
    assert main([command, "run_nope"]) == 2
    err = capsys.readouterr().err
    assert err == "agentledger: no run 'run_nope' in the store\n"


@pytest.mark.parametrize(
    "args", [["view", "-o"], ["export", "-o"], ["export", "--otlp-file"]], ids=["view", "export", "otlp-file"]
)
def test_unwritable_output_is_one_line(
    recorded: str, tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An output path in a missing folder is reported in one line, not a traceback."""
    target = str(tmp_path / "missing" / "out.file")
    assert main([args[0], recorded, *args[1:], target]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: ")
    assert target in err
    assert "Traceback" not in err


def test_torn_tail_is_a_one_line_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSONL log with a torn last record is repaired and the warning is one line."""
    import warnings

    store = tmp_path / "runs.jsonl"
    assert main(["demo", "--store", str(store)]) == 0
    capsys.readouterr()
    store.write_bytes(store.read_bytes()[:-40])
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["runs", "--store", str(store)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("agentledger: warning: ")
    assert err.count("\n") == 1
