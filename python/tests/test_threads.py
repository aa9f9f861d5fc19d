"""One Model called from several Python threads at once: every call gets its own
answer (the GIL is released while a model runs)."""

import sys
import threading

import numpy as np

import mithrilc


def test_threads_calling_one_model_get_right_answers(shared):
    bench = shared / "bench"
    x = np.load(bench / "gpt_block_b8_input.npy")
    m = mithrilc.load(bench / "gpt_block.json", params=bench / "gpt_block.safetensors", shapes={"input": ("B", *x.shape[1:])}, max={"B": 8}, threads=1)
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((1 + i % 8, *x.shape[1:])).astype(np.float32) for i in range(16)]
    want = [m(b)["output"] for b in batches]
    got = [None] * len(batches)
    errors = []

    def work(i):
        try:
            for _ in range(3):
                got[i] = m(batches[i])["output"]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_gil_is_released_while_a_model_runs(shared):
    # With a switch interval of an hour the main thread keeps the GIL except where it
    # blocks; a counting thread that gives the GIL up after every step (a short wait)
    # can count only while the main thread is inside a model call that released it.
    bench = shared / "bench"
    x = np.load(bench / "gpt_block_b8_input.npy")
    m = mithrilc.load(bench / "gpt_block.json", params=bench / "gpt_block.safetensors", shapes={"input": x.shape}, threads=1)
    counted = [0]
    running, stop = threading.Event(), threading.Event()

    def count():
        running.set()
        while not stop.wait(0.0001):
            counted[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(3600.0)
    t = threading.Thread(target=count)
    try:
        t.start()
        running.wait()
        before = counted[0]
        for _ in range(5):
            m(x)
        during = counted[0] - before
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert during > 0


def test_training_steps_and_calls_from_other_threads_interleave():
    # Calls read the weights while training steps write them (a read-write lock):
    # every call sees the weights of some step, and nothing waits forever.
    from test_train import SHAPES, TRAIN, dataset, initial_params

    batch = dataset()
    m = mithrilc.load(TRAIN, shapes=SHAPES, params=initial_params(), grad=True, threads=1)
    losses = []
    errors = []

    def call():
        try:
            for _ in range(30):
                losses.append(float(m(**batch)["final_cost"]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    first = m.train_step(batch, lr=0.5, momentum=0.9)
    for _ in range(30):
        last = m.train_step(batch, lr=0.5, momentum=0.9)
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a call waited forever"
    assert not errors, errors
    assert last < first
    assert all(np.isfinite(losses)) and len(losses) == 120
