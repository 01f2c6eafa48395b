"""The lab's worker processes: a worker that fails is a clear error in the main process, never a hang."""

import pytest

from bench.lab.crowd_nodes import CrowdParams
from bench.lab.netem import LinkModel, SharedLinks
from bench.lab.workers import WorkerError, WorkerPool


@pytest.mark.e2e
async def test_a_worker_that_cannot_start_its_nodes_is_a_clear_error(tmp_path):
    # A block size the proxy refuses: the worker's first node fails to start, in the worker process.
    params = CrowdParams(clients=2, workers=2, block_size="3 bananas")
    said: list[str] = []
    pool = WorkerPool(params, tmp_path, SharedLinks.create(tmp_path, LinkModel()), said.append)
    with pytest.raises(WorkerError, match="worker 0 failed") as failure:
        await pool.start()
    assert "block" in str(failure.value).lower()  # the worker's own traceback says what was wrong
    await pool.close()
    assert pool.verdicts is None  # no samples from a worker that never ran: the run cannot be judged valid
    assert not any(worker.process.is_alive() for worker in pool.workers)
