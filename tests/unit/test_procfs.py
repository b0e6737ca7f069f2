"""The benchmarks' process tree (benchmarks/procfs.py) holds what a task thread forked, as Spark's JVM forks
its Python daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.procfs import cpu_seconds, rss_bytes, tree, tree_rss

# A parent whose main thread forks one child and a second thread, which stays alive (its children would pass
# to another thread when it ends), another; it prints both pids and waits.
PARENT = """
import queue, subprocess, sys, threading
main = subprocess.Popen(["sleep", "60"])
forked = queue.Queue()
def fork_and_stay():
    forked.put(subprocess.Popen(["sleep", "60"]))
    threading.Event().wait()
threading.Thread(target=fork_and_stay, daemon=True).start()
print(main.pid, forked.get().pid, flush=True)
sys.stdin.read()
"""


def test_the_tree_holds_children_forked_by_any_thread_and_leaves_out_excluded_subtrees() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    by_main, by_thread = (int(pid) for pid in parent.stdout.readline().split())
    try:
        # What /proc/PID/task/PID/children shows: the main thread's child only.
        listed = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
        assert str(by_main) in listed and str(by_thread) not in listed
        assert sorted(tree(parent.pid)) == sorted([parent.pid, by_main, by_thread])
        assert sorted(tree(parent.pid, exclude={by_thread})) == sorted([parent.pid, by_main])
        assert tree_rss(parent.pid) == sum(rss_bytes(pid) for pid in (parent.pid, by_main, by_thread)) > 0
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(10)
        for pid in (by_main, by_thread):
            os.kill(pid, signal.SIGKILL)


def test_cpu_seconds_of_a_process_gone_is_zero_and_of_a_busy_one_grows() -> None:
    assert cpu_seconds(2**22 + 7) == 0.0 and rss_bytes(2**22 + 7) == 0
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert cpu_seconds(busy.pid, reaped_children=False) > 0.1
    finally:
        busy.kill()
        busy.wait()


# A stand-in for Spark's driver JVM: its command line names SparkSubmit and pyspark (as the JVM's class path
# does), and it starts a stand-in Python worker; it prints the worker's pid and waits.
DRIVER_JVM = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "pyspark.daemon"],
                          stdin=subprocess.PIPE)
print(worker.pid, flush=True)
sys.stdin.read()
worker.stdin.close()
worker.wait(10)
"""


def test_the_soak_counts_the_driver_jvm_once_not_again_among_the_python_workers() -> None:
    from benchmarks.soak import job_processes

    jvm = subprocess.Popen([sys.executable, "-c", DRIVER_JVM, "-cp", "/venv/pyspark/jars/*",
                            "org.apache.spark.deploy.SparkSubmit"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    assert jvm.stdin is not None and jvm.stdout is not None
    try:
        worker = int(jvm.stdout.readline())
        assert job_processes(jvm.pid) == ([jvm.pid], [worker])  # rooted at it: the suite runs JVMs of its own
    finally:
        jvm.stdin.close()
        jvm.wait(10)
