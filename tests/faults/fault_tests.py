#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault tests of trainbench-engine and its run store, end to end.

Usage: fault_tests.py ENGINE [--kills N] [--only NAME ...]

Each scenario attacks real engine processes and then checks, through the
engine's own read commands and through SQLite directly: the store's integrity
(integrity_check, foreign_key_check), that no committed step is lost (the
stored steps of a run are exactly 1..k, with k no more than the stream showed),
and the final status every reader shows (`list --json`, `show`).

  kills       N runs SIGKILLed at random moments (start-up, training,
              evaluation, the end): intact store, whole batches, `interrupted`.
  sigterm     SIGTERM: `stopped`, every streamed step stored.
  early_sigterm  SIGTERM at the engine's start (held pending until it can be
              handled): `stopped`, exit 130, nothing lost.
  lock        another process holds the write lock for 12 s: the run finishes
              with every step stored; `list` answers meanwhile.
  readonly    a store in a read-only folder: readers work and change nothing;
              `run` fails with a clear error. (As root: run as `nobody`, with
              a copy of the engine that `nobody` can reach.)
  shared      a store in a shared sticky folder, run by nobody and read by a
              second user: the reader leaves no file there, the owner runs on.
              (As root; skipped, with the reason, otherwise.)
  hostile     files that are not stores (text, foreign SQLite, newer schema,
              empty, a folder, truncated): refused by name, never changed, no crash.
  diskfull    a tmpfs that is full, or nearly, when a run starts: refused
              before training, with the reason, nothing recorded; one that
              fills up while the engine writes: the stream still ends, the
              store stays sound, readers show `interrupted`.
              Needs `unshare -m` and mount rights; skipped, with the reason, without.

Standard library only (python3, sqlite3). Exit 0 when every scenario passed
or was skipped with its reason, 1 otherwise.
"""
import argparse
import hashlib
import json
import os
import pwd
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ENGINE = ""
FAILURES = []
SKIPS = []


class Skip(Exception):
    """A scenario that cannot run on this machine; the message says why."""

# A small synthetic run: no data set files needed, about a second of training.
RUN = ["--device", "cpu", "--model", "mlp", "--dataset", "synthetic",
       "--set", "synthetic_shape=[1,16,16]", "--set", "synthetic_size=4096",
       "--test-limit", "2048", "--batch-size", "32", "--quiet"]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def as_user(uid, cmd):
    """`cmd` run as user id `uid` (its own group, no others). setpriv needs no
    account for the id, so two users other than root need no useradd."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *cmd]


def engine(*args, timeout=300, user=None):
    """The engine; with `user` (a uid), the copy that user_engine() made for it."""
    cmd = [ENGINE, *args] if user is None else as_user(user, [OTHERS_ENGINE[user], *args])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


# uid -> the copy of the engine that user runs (user_engine()).
OTHERS_ENGINE = {}


def user_engine(uid, folder):
    """Lets user id `uid` run the engine. The build's binary may lie where only
    its owner can reach it (a clone under /root, mode 0700), so the user gets a
    copy in `folder` (made readable and searchable; the folders above it must
    be, as /tmp is). Raises Skip, with the reason, when the user cannot run it."""
    if os.geteuid() != 0:
        raise Skip("running as another user needs root")
    if shutil.which("setpriv") is None:
        raise Skip("no setpriv(1) to run the engine as another user")
    os.makedirs(folder, exist_ok=True)
    os.chmod(folder, 0o755)
    copy = os.path.join(folder, "trainbench-engine")
    if not os.path.exists(copy):
        shutil.copy(ENGINE, copy)
        os.chmod(copy, 0o755)
    r = subprocess.run(as_user(uid, [copy, "--version"]), capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"user {uid} cannot run the engine copied to {copy}: "
                   f"{(r.stderr or r.stdout).strip() or r.returncode}")
    OTHERS_ENGINE[uid] = copy


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sound(db):
    """integrity_check and foreign_key_check, through SQLite itself (read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        ok = con.execute("PRAGMA integrity_check").fetchone()[0]
        fk = con.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        con.close()
    check(ok == "ok", f"{db}: integrity_check: {ok}")
    check(not fk, f"{db}: foreign_key_check: {fk}")


def stored_steps(db, run_id, series="step_time_ms"):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT m.step FROM step_metrics m JOIN series s ON s.id = m.series_id "
            "WHERE m.run_id = ? AND s.name = ? ORDER BY m.step", (run_id, series)).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def listed(db):
    r = engine("list", "--json", "--db", db)
    check(r.returncode == 0, f"list --json: exit {r.returncode}: {r.stderr}")
    return {run["id"]: run for run in json.loads(r.stdout)}


def shown_status(db, run_id):
    r = engine("show", str(run_id), "--db", db)
    check(r.returncode == 0, f"show {run_id}: exit {r.returncode}: {r.stderr}")
    line = next(l for l in r.stdout.splitlines() if l.strip().startswith("status"))
    return line.split()[1]


def streamed_steps(lines):
    steps = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a killed engine's last line may be cut short
        if e.get("type") == "step":
            steps.append(e["step"])
    return steps


def start_run(db, *extra):
    return subprocess.Popen([ENGINE, "run", "--db", db, "--events", "jsonl", *RUN, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_until(p, needle, what):
    """The lines of p's stdout up to the first that holds `needle`; fails, with
    p's stderr, when p ends first. (stderr is read only then: reading it while
    p runs would wait for its end while its stdout pipe fills.)"""
    lines = []
    while True:
        line = p.stdout.readline()
        if not line:
            p.wait()
            raise AssertionError(f"{what}: the engine ended early: {p.stderr.read().decode()[-2000:]}")
        lines.append(line.decode())
        if needle in line:
            return lines


def finish(p, timeout):
    """The rest of stdout and stderr, and the exit, of a run whose stdout was read
    with readline(). communicate() reads the pipe itself and would lose what
    readline() had already buffered (lines lost from the stream); the process is
    killed after `timeout` seconds."""
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        err = []
        reader = threading.Thread(target=lambda: err.append(p.stderr.read()))
        reader.start()
        out = p.stdout.read()
        reader.join()
        p.wait()
    finally:
        timer.cancel()
    return out, err[0]


# --------------------------------------------------------------- scenarios

def scenario_kills(tmp, kills):
    db = os.path.join(tmp, "kills.db")
    r = engine("run", "--db", db, *RUN, "--steps", "5")
    check(r.returncode == 0, f"first run: {r.stderr}")
    rng = random.Random(int(os.environ.get("FAULT_SEED", "11")))
    stages = {"before": 0, "training": 0, "after": 0}
    for i in range(kills):
        p = start_run(db, "--epochs", "5", "--name", f"kill {i}")
        time.sleep(rng.uniform(0.0, 4.0))
        p.kill()
        out, _ = p.communicate()
        lines = out.decode(errors="replace").splitlines()
        sound(db)
        runs = listed(db)
        run = runs[max(runs)]
        if run["name"] != f"kill {i}":
            stages["before"] += 1  # killed before the run was recorded
            continue
        steps = stored_steps(db, run["id"])
        streamed = streamed_steps(lines)
        check(steps == list(range(1, len(steps) + 1)),
              f"kill {i}: stored steps are not 1..k: {steps[:5]}..{steps[-5:]}")
        check(len(steps) <= max(streamed, default=0),
              f"kill {i}: {len(steps)} steps stored but {len(streamed)} streamed")
        if p.returncode == -9:
            check(run["status"] == "interrupted",
                  f"kill {i}: list shows {run['status']}, expected interrupted")
            check(shown_status(db, run["id"]) == "interrupted", f"kill {i}: show disagrees")
            stages["training" if streamed else "before"] += 1
        else:
            check(run["status"] == "finished", f"kill {i}: ended {p.returncode}, {run['status']}")
            stages["after"] += 1
    # The store is not wedged: a new run records normally.
    r = engine("run", "--db", db, *RUN, "--steps", "3", "--name", "after the kills")
    check(r.returncode == 0, f"run after the kills: {r.stderr}")
    sound(db)
    print(f"  kills: {kills} runs killed (before the first step {stages['before']}, "
          f"while training {stages['training']}, after the end {stages['after']})")


def scenario_sigterm(tmp):
    db = os.path.join(tmp, "term.db")
    for i in range(3):
        p = start_run(db, "--epochs", "50", "--name", f"term {i}")
        lines = []
        while len(streamed_steps(lines)) < 3 + 5 * i:
            line = p.stdout.readline()
            if not line:
                p.wait()
                raise AssertionError(f"term {i}: the engine ended early: {p.stderr.read().decode()}")
            lines.append(line.decode())
        p.send_signal(signal.SIGTERM)
        out, err = finish(p, timeout=60)
        lines += out.decode().splitlines()
        check(p.returncode == 130, f"term {i}: exit {p.returncode}: {err.decode()}")
        sound(db)
        run = listed(db)[i + 1]
        check(run["status"] == "stopped", f"term {i}: status {run['status']}")
        streamed = streamed_steps(lines)
        check(stored_steps(db, run["id"]) == streamed,
              f"term {i}: stored {len(stored_steps(db, run['id']))} of {len(streamed)} steps")


def scenario_early_sigterm(tmp):
    """SIGTERM sent the moment the engine starts. The engine is started with
    SIGTERM blocked, so the signal waits until the engine can take it (what a
    signal while it starts up needs): the run is recorded `stopped`, exit 130.
    (Unblocked, only the dynamic loader's first ~15 ms are left to the default
    action; the handler used to come after ~0.12 s.)"""
    db = os.path.join(tmp, "early.db")
    block = lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # noqa: E731
    p = subprocess.Popen([ENGINE, "run", "--db", db, "--events", "jsonl", *RUN, "--epochs", "20",
                          "--name", "early 0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=block)
    p.send_signal(signal.SIGTERM)
    out, err = finish(p, timeout=120)
    check(p.returncode == 130, f"a SIGTERM at the start: exit {p.returncode}: {err.decode()[-500:]}")
    run = listed(db)[1]
    check(run["status"] == "stopped", f"a SIGTERM at the start: status {run['status']}")
    lines = out.decode().splitlines()
    check(stored_steps(db, 1) == streamed_steps(lines), "a SIGTERM at the start: steps lost")
    check(len(streamed_steps(lines)) <= 1, f"{len(streamed_steps(lines))} steps after a SIGTERM "
          "at the start (one ends the step it is in)")


def scenario_lock(tmp):
    db = os.path.join(tmp, "lock.db")
    r = engine("run", "--db", db, *RUN, "--steps", "2")
    check(r.returncode == 0, r.stderr)
    p = start_run(db, "--steps", "60", "--name", "under lock")
    read_until(p, b'"type":"run_started"', "under lock")  # the run is recorded and training
    holder = sqlite3.connect(db, timeout=10, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    t0 = time.monotonic()
    r = engine("list", "--db", db, timeout=30)
    check(r.returncode == 0, f"list under the lock: {r.stderr}")
    check(time.monotonic() - t0 < 5, f"list took {time.monotonic() - t0:.1f} s under the lock")
    time.sleep(max(0.0, 12 - (time.monotonic() - t0)))  # past the 10 s busy timeout
    holder.execute("COMMIT")
    holder.close()
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0, f"run under the lock: exit {p.returncode}: {err.decode()}")
    sound(db)
    run = listed(db)[2]
    check(run["status"] == "finished", f"status {run['status']}")
    check(stored_steps(db, 2) == list(range(1, 61)), "steps lost under the lock")


def scenario_readonly(tmp):
    folder = os.path.join(tmp, "ro")
    os.mkdir(folder)
    db = os.path.join(folder, "runs.db")
    r = engine("run", "--db", db, *RUN, "--steps", "3")
    check(r.returncode == 0, r.stderr)
    check(not os.path.exists(db + "-wal"), "the engine left a -wal file")
    before = sha256(db)
    user = None
    if os.geteuid() == 0:  # root ignores permissions: the readers run as nobody
        user = NOBODY
        os.chmod(tmp, 0o755)
        user_engine(user, os.path.join(tmp, "bin"))
    os.chmod(db, 0o444)
    os.chmod(folder, 0o555)
    try:
        for args in (["list"], ["list", "--json"], ["show", "1"], ["compare", "1", "1"],
                     ["export", "1", "--format", "json"]):
            r = engine(*args, "--db", db, user=user)
            check(r.returncode == 0, f"{' '.join(args)} on a read-only store: {r.stderr}")
        r = engine("run", "--db", db, *RUN, "--steps", "1", user=user)
        check(r.returncode == 1 and db in r.stderr,
              f"run on a read-only store: exit {r.returncode}: {r.stderr}")
        if user is not None:  # root may create a file in any folder
            new = os.path.join(folder, "new.db")
            r = engine("run", "--db", new, *RUN, "--steps", "1", user=user)
            check(r.returncode == 1 and f"the folder '{folder}' is not writable" in r.stderr,
                  f"a new store in a read-only folder: exit {r.returncode}: {r.stderr}")
    finally:
        os.chmod(folder, 0o755)
        os.chmod(db, 0o644)
    check(sha256(db) == before, "a reader changed the read-only store")
    check(not os.path.exists(db + "-shm"), "a reader created a -shm file")


def free_uid():
    """A user id with no account (setpriv needs none): a second user besides nobody."""
    uid = 61000
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def scenario_shared(tmp):
    """A store in a shared sticky folder (like /tmp) that one user runs in and
    another reads: the reader leaves no file there, so the owner's next run
    is not locked out by another user's -wal/-shm."""
    owner, reader = NOBODY, free_uid()
    os.chmod(tmp, 0o755)
    for uid in (owner, reader):
        user_engine(uid, os.path.join(tmp, "bin"))
    shared = os.path.join(tmp, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    db = os.path.join(shared, "runs.db")

    def files_of(uid):
        return sorted(f for f in os.listdir(shared) if os.stat(os.path.join(shared, f)).st_uid == uid)

    r = engine("run", "--db", db, *RUN, "--steps", "3", user=owner)
    check(r.returncode == 0, f"the owner's first run: {r.stderr}")
    for args in (["list"], ["list", "--json"], ["show", "1"], ["export", "1", "--format", "json"]):
        r = engine(*args, "--db", db, user=reader)
        check(r.returncode == 0, f"{' '.join(args)} by another user: {r.stderr}")
        check(not files_of(reader), f"{' '.join(args)} by another user left {files_of(reader)}")
    r = engine("run", "--db", db, *RUN, "--steps", "3", user=owner)
    check(r.returncode == 0, f"the owner's run after another user read the store: {r.stderr}")

    # While the owner's engine writes, the reader reads through its -wal and -shm.
    p = subprocess.Popen(as_user(owner, [OTHERS_ENGINE[owner], "run", "--db", db, "--events", "jsonl",
                                         *RUN, "--steps", "400", "--name", "watched"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    read_until(p, b'"type":"step"', "the watched run")
    r = engine("list", "--json", "--db", db, user=reader)
    check(r.returncode == 0, f"list during the owner's run: {r.stderr}")
    check(any(run["name"] == "watched" for run in json.loads(r.stdout)), "list missed the live run")
    check(not files_of(reader), f"list during the owner's run left {files_of(reader)}")
    out, err = finish(p, timeout=120)
    check(p.returncode == 0, f"the watched run: exit {p.returncode}: {err.decode()}")
    runs = listed(db)
    check([runs[i]["status"] for i in sorted(runs)] == ["finished"] * 3,
          f"statuses: {[runs[i]['status'] for i in sorted(runs)]}")
    sound(db)


def scenario_hostile(tmp):
    def make(name, content=None, sql=None):
        path = os.path.join(tmp, name)
        if content is not None:
            with open(path, "wb") as f:
                f.write(content)
        if sql:
            con = sqlite3.connect(path)
            con.executescript(sql)
            con.close()
        return path

    good = os.path.join(tmp, "good.db")
    check(engine("run", "--db", good, *RUN, "--steps", "2").returncode == 0, "good store")
    with open(good, "rb") as f:
        good_bytes = f.read()
    newer = make("newer.db", good_bytes)
    con = sqlite3.connect(newer)
    con.execute("UPDATE schema_version SET version = 99")
    con.commit()
    con.close()
    files = {
        "text": (make("notes.txt", b"not a database\n" * 200), "not a database"),
        "foreign": (make("photos.db", sql="CREATE TABLE photos (id INTEGER);"),
                    "not a Trainbench run database"),
        "newer": (newer, "schema version 99"),
        "empty": (make("empty.db", b""), "exists but is empty"),
        "truncated": (make("truncated.db", good_bytes[:len(good_bytes) // 3]), ""),
    }
    folder = os.path.join(tmp, "a-folder.db")
    os.mkdir(folder)
    for kind, (path, message) in files.items():
        before = sha256(path)
        for args in (["list"], ["show", "1"], ["run", *RUN, "--steps", "1"]):
            r = engine(*args, "--db", path)
            check(0 <= r.returncode < 128, f"{kind}: {args[0]} crashed ({r.returncode})")
            if kind != "truncated":
                check(r.returncode == 1, f"{kind}: {args[0]} exit {r.returncode}")
                check(path in r.stderr and message in r.stderr,
                      f"{kind}: {args[0]} says: {r.stderr.strip()}")
            check(sha256(path) == before, f"{kind}: {args[0]} changed the file")
    for args in (["list"], ["run", *RUN, "--steps", "1"]):
        r = engine(*args, "--db", folder)
        check(r.returncode == 1 and "it is a folder" in r.stderr,
              f"folder: {args[0]}: {r.returncode} {r.stderr.strip()}")


def scenario_diskfull(tmp):
    if os.environ.get("FAULT_INNER_DISKFULL"):
        return diskfull_inside(os.environ["FAULT_INNER_DISKFULL"])
    if shutil.which("unshare") is None:
        SKIPS.append("diskfull: no unshare(1) to mount a small tmpfs")
        return
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            f"mount -t tmpfs -o size=64k none '{tmp}'"], capture_output=True)
    if probe.returncode != 0:
        SKIPS.append("diskfull: this machine does not allow a private tmpfs mount "
                     f"({probe.stderr.decode().strip() or probe.returncode})")
        return
    mnt = os.path.join(tmp, "small")
    os.mkdir(mnt)
    script = (f"mount -t tmpfs -o size=1m none '{mnt}' && "
              f"FAULT_INNER_DISKFULL='{mnt}' exec '{sys.executable}' '{os.path.abspath(__file__)}' "
              f"'{ENGINE}' --only diskfull")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=600)
    sys.stdout.write("".join("  inside: " + l + "\n" for l in r.stdout.splitlines()))
    check(r.returncode == 0, f"diskfull (inside its mount namespace) failed:\n{r.stdout}{r.stderr}")


def fill(filler, leave_pages):
    """Fills the disk with `filler` but for `leave_pages` pages of 4 KiB."""
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    os.truncate(filler, max(0, os.path.getsize(filler) - leave_pages * 4096))


def diskfull_inside(mnt):
    db = os.path.join(mnt, "runs.db")
    r = engine("run", "--db", db, *RUN, "--steps", "2")
    check(r.returncode == 0, r.stderr)
    filler = os.path.join(mnt, "filler")

    # Full, or all but a few pages (room to open the store and record the run's
    # row, not its steps): refused before training, saying why; nothing recorded.
    for free_pages in (0, 16):
        fill(filler, free_pages)
        p = start_run(db, "--steps", "200", "--name", "on a full disk")
        out, err = finish(p, timeout=300)
        check(p.returncode == 1 and "no room on its disk" in err.decode() and db in err.decode(),
              f"a run with {free_pages} pages free: exit {p.returncode}: {err.decode()[-1000:]}")
        check(not streamed_steps(out.decode().splitlines()),
              f"a run with {free_pages} pages free trained")
        os.remove(filler)
        check([run["name"] for run in listed(db).values()] == ["mlp b32"],
              f"a run with {free_pages} pages free was recorded: {listed(db)}")

    # Room to start but not to finish: the stream still ends, the store stays sound.
    fill(filler, 48)
    p = start_run(db, "--steps", "1000", "--name", "disk full")
    out, err = p.communicate(timeout=300)
    lines = out.decode().splitlines()
    events = [json.loads(l) for l in lines]
    types = [e["type"] for e in events]
    check("finished" in types, f"disk full: the stream has no final event: {err.decode()[-2000:]}")
    check(len(streamed_steps(lines)) == 1000, "disk full: training stopped early")
    os.truncate(filler, max(0, os.path.getsize(filler) - 256 * 1024))  # room to read
    sound(db)
    runs = listed(db)
    run = runs[max(runs)]
    if p.returncode == 1:
        check(types[-1] == "log" and "could not record the end" in events[-1]["message"],
              f"disk full: the stream does not say the end was lost: {events[-1]}")
        check(run["status"] == "interrupted", f"disk full: readers show {run['status']}")
        steps = stored_steps(db, run["id"])
        check(steps == list(range(1, len(steps) + 1)), "disk full: stored steps have holes")
    else:
        check(p.returncode == 0 and run["status"] == "finished",
              f"disk full: exit {p.returncode}, status {run['status']}")
        print("  diskfull: the store still had room (the run was recorded whole)")
    os.remove(filler)
    r = engine("run", "--db", db, *RUN, "--steps", "2", "--name", "after the disk was freed")
    check(r.returncode == 0, f"disk full: no run once space is back: {r.stderr}")
    sound(db)


def uid_of(name, fallback):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return fallback


NOBODY = uid_of("nobody", 65534)


def main():
    global ENGINE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine")
    parser.add_argument("--kills", type=int, default=int(os.environ.get("FAULT_KILLS", "10")))
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    ENGINE = os.path.abspath(args.engine)
    scenarios = {
        "kills": lambda tmp: scenario_kills(tmp, args.kills),
        "sigterm": scenario_sigterm,
        "early_sigterm": scenario_early_sigterm,
        "lock": scenario_lock,
        "readonly": scenario_readonly,
        "shared": scenario_shared,
        "hostile": scenario_hostile,
        "diskfull": scenario_diskfull,
    }
    for name, body in scenarios.items():
        if args.only and name not in args.only:
            continue
        tmp = tempfile.mkdtemp(prefix=f"tb-fault-{name}-")
        t0 = time.monotonic()
        try:
            body(tmp)
            print(f"PASS {name} ({time.monotonic() - t0:.0f} s)", flush=True)
        except Skip as e:
            SKIPS.append(f"{name}: {e}")
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next scenario
            FAILURES.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for s in SKIPS:
        print(f"SKIP {s}")
    if FAILURES:
        print(f"fault tests failed: {', '.join(FAILURES)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
