"""The kit's command (`dht-conformance`, `python -m dht.conformance`): grade an
implementation of the v0 API by SPEC.md's rules.

It runs the spec tests of the chosen tiers (the package's suite, dht/conformance/suite)
under pytest, each test starting the implementation's own processes from the node
command (or grading a cluster already running, --nodes), and writes report.md (per
tier: rules and tests passed and failed, and one line per failed rule) and junit.xml
into the output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dht.conformance.fault_runs import fault_runs
from dht.conformance.faults import QUICK_ENV
from dht.conformance.http_client import status_code
from dht.conformance.launcher import NODE_CWD_ENV, NODES_ENV, TOPOLOGY_HOST_ENV
from dht.conformance.nemesis import SCHEDULE_ENV, SECONDS_ENV, SEED_ENV, SHRINK_ENV
from dht.conformance.nemesis_schedule import new_seed
from dht.conformance.report import (
    RunFacts,
    SpecTestResult,
    count_tiers,
    exit_code,
    opening_lines,
    render,
    without_machine_paths,
)
from dht.conformance.running_cluster import (
    CONTROL_ENV,
    CONTROL_MEANING,
    CONTROLS,
    Controls,
    control_problem,
    parse_node_urls,
)
from dht.conformance.running_cluster import PLACEHOLDER_HELP as CONTROL_PLACEHOLDER_HELP
from dht.conformance.spec import PART_ONE_TIERS, SPEC_PATH, load_rules
from dht.extras import NODE, missing_line
from dht.history.run_folder import RUNS_ENV
from dht.testbed.node_template import (
    COURSE_HOST,
    NUMERIC_HOST,
    PLACEHOLDER_HELP,
    TOPOLOGY_HOSTS,
    node_line,
    template_problem,
    topology_url,
)
from dht.testbed.toxiproxy import free_ports

SUITE = Path(__file__).resolve().parent / "suite"
# Where the fault scenarios leave their run folders, inside the report folder.
RUNS_FOLDER = "runs"
EPILOG = (
    "The node command is a template run once per node, with these placeholders:\n"
    + PLACEHOLDER_HELP
    + """\
  The course's launcher names its nodes http://localhost:PORT and implementations find
  themselves in the list by that string, so a --node-command gets that form;
  --topology-host 127.0.0.1 gives http://127.0.0.1:PORT instead. dht's own nodes (no
  --node-command) get 127.0.0.1, the address they bind. Clients reach every node at
  http://127.0.0.1:PORT either way.
Tiers (SPEC.md part one). The first three are the course's contract: exactly what
the course's own tests ask (its keys, 1 KiB values, replicas refused for A = 0 or
A > F); the report's first line says whether they all pass.
  core         the v0 single-node API: status codes, 400 rules, keys and values
  range        /v0/entities on one node: bounds, order, one chunk per record
  replication  replicas=ack/from on 2 and 3 nodes, judged through the public API
  durability   acknowledged writes survive kill -9 and a graceful restart
  robustness   bad input, slow and idle clients, bursts: no 5xx but 503/504, no hang
  faults       3 nodes under kill -9, SIGSTOP, crash-restart under load, slow and cut
               links (links need root on Linux: each node in a network namespace,
               else those rules are skipped with the reason); each scenario's
               history, fault timeline and plot go into the report
  convergence  a write a node missed reaches it after its restart, unasked
  power        3 nodes, each node's folder on a filesystem that drops what was not
               fsynced when the kit cuts its power: one node's power cut under load,
               then every node's at once (needs root on Linux and FUSE, else skipped
               with the reason); a store that acknowledges before fsync fails
  partition    3 nodes with clients through every node, the cut-off one included:
               one node cut off both ways, a bridge, one-way cuts (the namespace
               mode, as links: root on Linux, else skipped with the reason)
  disk         3 nodes, each on a 256 MiB volume of its own: one filled to the last
               byte under load, then freed (root on Linux, else skipped)
  strict       stricter than the course, as dht keeps it: 1 MiB values, any key
               (non-ASCII, 10,000 characters, percent-encoded), malformed replicas
               and F beyond the cluster refused, ranges in UTF-8 byte order
  clock        3 nodes, one node's wall clock 30 s behind, 30 s ahead, stepped back
               10 s, strobing: a write acknowledged after another one must win.
               The clock is moved from outside (libfaketime preloaded, Linux; a JVM
               or Python node, not a Go one), else the rules are skipped with the
               reason; each scenario's history and plot go into the report
  nemesis      3 nodes for --nemesis-seconds under a random schedule drawn from
               --seed: kill -9, pause, slow and cut links, clock offsets, power cuts,
               a full disk, one node at a time (kinds this machine cannot apply are
               left out, with the reason); a node that does not come back from a fault
               fails. The same seed gives the same schedule and client operations; a
               failing run is shrunk (delta debugging over its faults, within
               --shrink-minutes) to the smallest schedule that still fails, with its
               seed, timeline and plot
A cluster already running (in containers, on other hosts, under a course's launcher)
is graded with --nodes URL,URL,... instead of --node-command. The kit starts, stops
and wipes nothing itself; what the tests would do to a node's process it does through
the control commands given, each a template run for one node (as the node command is:
split like a shell line, without a shell), with these placeholders:
"""
    + CONTROL_PLACEHOLDER_HELP
    + """  A test that needs a control not given is skipped with that reason in the report,
  never failed; a test that takes a node away (kill, stop, pause) needs the command
  that gives it back (start, resume), since every test leaves the cluster serving for
  the next. Tests that need what only the kit's own start of nodes gives are skipped
  the same way: the range, robustness, strict, clock, partition, power, disk and
  nemesis tiers, link faults, a node's first second, a cluster of another size than
  --nodes gives, durability on one node alone when --nodes gives several. Every test's
  keys carry a prefix of their own (a new one on every run), so state left in the
  cluster by other tests and runs is never read. One-node tests go to the first node.
The report's second line says whether any acknowledged write was lost, read stale,
undone or invented: under kill -9 (durability) or in any faults or clock scenario's
history, the nemesis's included.
Exit status: 0 every chosen rule passed, 1 some failed, 2 the run itself failed.
Examples:
  python -m dht.conformance --tiers core,range \\
      --node-command 'java -jar my.jar --port {port} --dir {data_dir} --topology {cluster}'
  python -m dht.conformance --tiers core,replication,durability,faults --quick \\
      --nodes http://127.0.0.1:8080,http://127.0.0.1:8081,http://127.0.0.1:8082 \\
      --kill-command 'podman kill -s KILL dht-{number}' \\
      --start-command 'podman start dht-{number}' \\
      --stop-command 'podman stop -t 10 dht-{number}'
  (under podman, give the start command of docs/kit.md: it also clears the connections
  the host tracked to the container's old address)
"""
)


def parse_tiers(text: str) -> tuple[str, ...]:
    tiers = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [tier for tier in tiers if tier not in PART_ONE_TIERS]
    if unknown or not tiers:
        named = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(
            f"unknown tier {named}; choose from {', '.join(PART_ONE_TIERS)}"
        )
    return tiers


def program_name() -> str:
    """`dht-conformance` when run as the installed command, else `python -m ...`."""
    called = Path(sys.argv[0]).name
    return "python -m dht.conformance" if called in ("__main__.py", "-m", "-c", "") else called


def kit_version() -> str:
    try:
        return version("dht")
    except PackageNotFoundError:  # run from a folder that was never installed
        return "unknown (not installed)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {kit_version()}")
    parser.add_argument(
        "--node-command",
        help="the command that starts one node (default: dht's own, python -m dht node, "
        "where dht[node] is installed)",
    )
    parser.add_argument(
        "--nodes",
        metavar="URL,URL,...",
        help="grade a cluster already running at these URLs, http://HOST:PORT each, "
        "instead of starting nodes (not with --node-command)",
    )
    for name in CONTROLS:
        parser.add_argument(
            f"--{name}-command",
            metavar="TEMPLATE",
            help=f"with --nodes, how to {CONTROL_MEANING[name]}",
        )
    parser.add_argument(
        "--topology-host",
        choices=TOPOLOGY_HOSTS,
        help="the host of the node URLs in {cluster} and {self}: "
        f"http://HOST:PORT (default: {COURSE_HOST}, the course's form, for a "
        f"--node-command; {NUMERIC_HOST} for dht's own nodes)",
    )
    parser.add_argument(
        "--tiers",
        type=parse_tiers,
        default=PART_ONE_TIERS,
        help="comma-separated tiers to run (default: all of them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("conformance-report"),
        help="folder for report.md, junit.xml, results.jsonl, pytest.log "
        "(default: ./conformance-report)",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=15.0,
        help="seconds a node may take to answer /v0/status after its start before the "
        "rule that started it fails (default: 15; rule 1.1 itself asks for 1 s)",
    )
    parser.add_argument(
        "--rule-timeout",
        type=float,
        default=300.0,
        help="seconds one test may take before it fails as hung (default: 300)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shorter fault scenarios (seconds instead of tens of seconds each), for CI; "
        "the rules and their bounds are the same",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="the nemesis's seed: the same seed gives the same schedule of faults and the "
        "same client operations (default: a new one, printed and in the report)",
    )
    parser.add_argument(
        "--nemesis-seconds",
        type=float,
        help="how long the nemesis's schedule runs (default: 300; 30 with --quick)",
    )
    parser.add_argument(
        "--nemesis-schedule",
        type=Path,
        help="a nemesis run folder's schedule.json, run as it is instead of one drawn "
        "from --seed: the smallest failing schedule a shrink found, run again",
    )
    parser.add_argument(
        "--shrink-minutes",
        type=float,
        default=10.0,
        help="how long a failing nemesis run may be shrunk to its smallest failing "
        "schedule (default: 10; 0 does not shrink)",
    )
    parser.add_argument(
        "-k",
        dest="select",
        metavar="EXPRESSION",
        help="only tests whose name matches, as pytest -k (for a re-run of one rule)",
    )
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.node_urls = running_cluster_args(parser, args)
    if args.seed is None:
        args.seed = new_seed()
    if args.nemesis_seconds is None:
        args.nemesis_seconds = 30.0 if args.quick else 300.0
    if args.topology_host is None:
        args.topology_host = NUMERIC_HOST if args.node_command is None else COURSE_HOST
    if args.node_command is not None:
        if (problem := template_problem(args.node_command)) is not None:
            parser.error(problem)
    return args


def running_cluster_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The URLs of --nodes, checked with the control commands (parser.error when they
    cannot be used); [] when the kit starts its own nodes."""
    given = [name for name in CONTROLS if getattr(args, f"{name}_command") is not None]
    if args.nodes is None:
        if given:
            parser.error(f"--{given[0]}-command acts on the nodes of --nodes; give --nodes too")
        return []
    if args.node_command is not None:
        parser.error(
            "give --nodes (a cluster already running) or --node-command (nodes the kit "
            "starts), not both"
        )
    if args.topology_host is not None:
        parser.error("--topology-host names the nodes the kit starts; --nodes gives the URLs")
    for name in given:
        if (problem := control_problem(name, getattr(args, f"{name}_command"))) is not None:
            parser.error(problem)
    try:
        return parse_node_urls(args.nodes)
    except ValueError as error:
        parser.error(str(error))


def controls_of(args: argparse.Namespace) -> Controls:
    return Controls(
        {
            name: getattr(args, f"{name}_command")
            for name in CONTROLS
            if getattr(args, f"{name}_command") is not None
        }
    )


def nodes_not_serving(urls: list[str], start_timeout: float) -> str | None:
    """None when every node of --nodes answers /v0/status with 200 within
    `start_timeout`, else which does not and what it answered: a cluster that is not up
    is told in one line before a single rule runs."""
    deadline = time.monotonic() + start_timeout
    for number, url in enumerate(urls, start=1):
        while (answer := status_code(url)) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        if answer != 200:
            said = "nothing answered" if answer is None else f"it answered {answer}"
            return f"node{number} {url}: GET /v0/status within {start_timeout} s: {said}"
    return None


def pytest_command(args: argparse.Namespace, results: Path) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        f"--rootdir={SUITE}",
        "-c",
        str(SUITE / "suite.ini"),
        "-p",
        "dht.conformance.plugin",
        "-m",
        " or ".join(args.tiers),
        "-p",
        "dht.conformance.fixtures",
        f"--conformance-results={results}",
        f"--junitxml={args.out / 'junit.xml'}",
        f"--timeout={args.rule_timeout}",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rN",
    ]
    return command + (["-k", args.select] if args.select else [])


def read_results(path: Path) -> list[SpecTestResult]:
    if not path.exists():
        return []
    results = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = json.loads(line)
        if fields["tier"] is None:
            continue
        fields["rules"] = tuple(fields["rules"])
        results.append(SpecTestResult(**fields))
    return results


def preflight(node_command: str, start_timeout: float, topology_host: str) -> str | None:
    """Starts one node alone, as the tests will (its URL in {cluster} and {self} on
    `topology_host`), and waits for /v0/status: None when it answered 200, else why not
    (its exit and last output). A command that cannot start at all is told in one line
    before a single rule runs, not once per rule."""
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    own = topology_url(topology_host, port)
    with tempfile.TemporaryDirectory(prefix="dht-conformance-") as data_dir:
        line = node_line(node_command, port, data_dir, [own], own)
        try:
            process = subprocess.Popen(
                shlex.split(line), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as error:
            return f"could not run {line!r}: {error}"
        try:
            deadline = time.monotonic() + start_timeout
            while time.monotonic() < deadline and process.poll() is None:
                if status_code(url) == 200:
                    return None
                time.sleep(0.05)
        finally:
            process.kill()
            output = process.communicate()[0].decode(errors="replace").strip()
        code = process.returncode
        last = output.splitlines()[-1] if output else "(no output)"
        if code is not None and code < 0:  # killed by us: it never answered
            return (
                f"{line!r} did not answer /v0/status within {start_timeout} s; last output: {last}"
            )
        return f"{line!r} exited with code {code} before answering /v0/status: {last}"


def machine_folders(
    node_command: str | None, scratch: str, controls: Controls | None = None
) -> list[str]:
    """The folders of this machine a run's files may name: where nodes kept their data,
    where the kit and Python live, where it ran from, the home folder, and the folders
    of the absolute paths in the node command and the control commands."""
    folders = [scratch, sys.prefix, sys.base_prefix, os.getcwd(), str(Path.home())]
    folders.append(str(Path(__file__).resolve().parents[2]))
    commands = [node_command or "", *(controls.commands.values() if controls else ())]
    for word in (word for command in commands for word in shlex.split(command)):
        if word.startswith("/"):
            folders.append(str(Path(word).parent))
    return folders


def make_portable(out: Path, folders: list[str]) -> None:
    """The report folder can be moved or sent: it carries the spec its links point at,
    and its text files name none of this machine's `folders`."""
    for path in out.rglob("*"):
        if path.suffix in (".md", ".xml", ".log", ".jsonl", ".json", ".txt"):
            text = path.read_text(encoding="utf-8", errors="replace")
            portable = without_machine_paths(text, [str(out), *folders])
            if portable != text:
                path.write_text(portable, encoding="utf-8")
    shutil.copyfile(SPEC_PATH, out / SPEC_PATH.name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.node_urls:
        problem = nodes_not_serving(args.node_urls, args.start_timeout)
        if problem is not None:
            print(f"the cluster of --nodes does not serve: {problem}", file=sys.stderr)
            return 2
    elif args.node_command is None:
        # dht's own nodes, the default, are the node's part of dht, not the kit's.
        missing = missing_line(
            f"{program_name()} without --node-command (dht's own nodes)",
            [NODE],
            instead="give --node-command TEMPLATE to grade another implementation",
        )
        if missing is not None:
            print(f"error: {missing}", file=sys.stderr)
            return 2
    else:
        problem = preflight(args.node_command, args.start_timeout, args.topology_host)
        if problem is not None:
            print(f"the node command does not start a node: {problem}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.jsonl"
    results_path.unlink(missing_ok=True)
    runs = args.out / RUNS_FOLDER
    shutil.rmtree(runs, ignore_errors=True)
    env = os.environ | {
        "DHT_START_TIMEOUT": str(args.start_timeout),
        RUNS_ENV: str(runs),
        NODE_CWD_ENV: os.getcwd(),
        QUICK_ENV: "1" if args.quick else "0",
        TOPOLOGY_HOST_ENV: args.topology_host,
        SEED_ENV: str(args.seed),
        SECONDS_ENV: str(args.nemesis_seconds),
        SHRINK_ENV: str(args.shrink_minutes),
    }
    if args.nemesis_schedule is not None:
        env[SCHEDULE_ENV] = str(args.nemesis_schedule.resolve())
    for name in ["DHT_NODE_COMMAND", NODES_ENV, *CONTROL_ENV.values()]:
        env.pop(name, None)
    if args.node_command is not None:
        env["DHT_NODE_COMMAND"] = args.node_command
    controls = controls_of(args)
    if args.node_urls:
        env[NODES_ENV] = ",".join(args.node_urls)
        env |= controls.environment()
    implementation = args.node_command or "dht (python -m dht node)"
    if args.node_urls:
        implementation = f"the running cluster {','.join(args.node_urls)}"
    target = (
        "{cluster} and {self} name nodes http://" + args.topology_host + ":PORT"
        if not args.node_urls
        else "controls " + (", ".join(controls.commands) or "none")
    )
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    started = time.monotonic()
    print(
        f"conformance: tiers {', '.join(args.tiers)} against {implementation}; {target}", flush=True
    )
    if "nemesis" in args.tiers and args.nemesis_schedule is not None:
        print(f"nemesis: the schedule of {args.nemesis_schedule}", flush=True)
    elif "nemesis" in args.tiers:
        print(
            f"nemesis: seed {args.seed}, {args.nemesis_seconds:g} s of faults, "
            f"shrunk within {args.shrink_minutes:g} min if it fails",
            flush=True,
        )
    with (
        tempfile.TemporaryDirectory(prefix="dht-conformance-") as scratch,
        (args.out / "pytest.log").open("wb") as log,
    ):
        pytest = subprocess.run(
            [*pytest_command(args, results_path), f"--basetemp={scratch}/pytest"],
            cwd=args.out,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
        folders = machine_folders(args.node_command, scratch, controls)
    results = read_results(results_path)
    # pytest's 0 and 1 are "all passed" and "some failed"; anything else (a usage or
    # collection error, no test selected) means the rules were never run.
    if pytest.returncode not in (0, 1) or not results:
        log_tail = (args.out / "pytest.log").read_text(errors="replace").splitlines()[-15:]
        print(
            f"the run itself failed (pytest exit {pytest.returncode}); the end of "
            f"{args.out / 'pytest.log'}:\n" + "\n".join(log_tail),
            file=sys.stderr,
        )
        return 2
    facts = RunFacts(
        command=implementation,
        tiers=args.tiers,
        started=started_at,
        seconds=time.monotonic() - started,
        spec_link=SPEC_PATH.name,
        controls=tuple(controls.commands.items()),
    )
    found_runs = fault_runs(args.out, runs)
    report = render(results, load_rules(), facts, found_runs)
    (args.out / "report.md").write_text(report, encoding="utf-8")
    make_portable(args.out, folders)
    for count in count_tiers(results, args.tiers):
        print(
            f"  {count.tier:<12} {count.verdict:<8} rules {count.rules_passed}/"
            f"{count.rules_total} passed, tests {count.tests_passed} passed, "
            f"{count.tests_failed} failed, {count.tests_skipped} skipped"
        )
    for line in opening_lines(results, found_runs, args.tiers):
        print(line.replace("**", "").replace("`", ""))
    print(f"report: {args.out / 'report.md'}  junit: {args.out / 'junit.xml'}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
