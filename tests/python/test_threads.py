"""Threads: one session shared by many threads (runs are serialised per session, each correct),
a session per thread, and the GIL released while kiln runs."""
import threading
import time

import numpy as np

import kiln
import models


def test_one_session_many_threads():
    s = kiln.InferenceSession(models.add())
    errors, results = [], {}

    def work(t):
        try:
            for i in range(25):
                a = np.full((3, 3), t, np.float32)
                b = np.full((3, 3), i, np.float32)
                (c,) = s.run(None, {"A": a, "B": b})
                if not np.array_equal(c, a + b):
                    errors.append((t, i, c))
            results[t] = True
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert len(results) == 8


def test_session_per_thread():
    m = models.two_outputs()
    errors = []

    def work(t):
        try:
            s = kiln.InferenceSession(m)
            x = np.full((2, 2), t, np.float32)
            for _ in range(10):
                y, z = s.run(None, {"x": x})
                assert np.array_equal(y, 2 * x) and np.array_equal(z, x + 1)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_gil_released_during_run():
    o = kiln.SessionOptions()
    o.intra_op_num_threads = 1
    s = kiln.InferenceSession(models.matmul_chain(512, 24), sess_options=o, providers=["CPUExecutionProvider"])
    x = np.ones((512, 512), np.float32) / 512
    s.run(None, {"x": x})  # warm up
    ticks, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    s.run(None, {"x": x})
    t1 = time.perf_counter()
    stop.set()
    th.join()
    # the other thread ran in the middle of the run: the run did not hold the GIL
    mid = [t for t in ticks if t0 + 0.25 * (t1 - t0) < t < t1 - 0.25 * (t1 - t0)]
    assert t1 - t0 > 0.01, "the run is too short to tell"
    assert mid, f"no tick of the other thread during the middle of a {1000 * (t1 - t0):.0f} ms run"


def test_terminate_from_another_thread():
    if not kiln.RunOptions.supported:
        import pytest
        pytest.skip("this kiln has no kiln_run_options")
    o = kiln.SessionOptions()
    o.intra_op_num_threads = 1
    s = kiln.InferenceSession(models.matmul_chain(256, 16), sess_options=o, providers=["CPUExecutionProvider"])
    x = np.ones((256, 256), np.float32)
    ro = kiln.RunOptions()
    timer = threading.Timer(0.02, lambda: setattr(ro, "terminate", True))
    timer.start()
    cancelled = False
    try:
        for _ in range(10000):
            s.run(None, {"x": x}, ro)
    except kiln.Cancelled:
        cancelled = True
    timer.join()
    assert cancelled
    ro.terminate = False
    s.run(None, {"x": x}, ro)  # the session is still usable
