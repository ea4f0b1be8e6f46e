#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""engine_run.reduce_run on a made-up exported run: the step figures after
the warm-up, and the convolution workspaces read from the environment's
kernel paths (cuDNN plans record theirs; CPU paths have none)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_run  # noqa: E402


def exported(kernel_paths):
    return {"step_series": {"step_time_ms": [[1, 0.0, 900.0], [2, 0.0, 10.0], [3, 0.0, 12.0],
                                             [4, 0.0, 11.0]],
                            "data_wait_ms": [[2, 0.0, 1.0], [3, 0.0, 1.0], [4, 0.0, 1.0]]},
            "summary": {"final_train_loss": 0.5, "gpu_mem_peak_bytes": 1 << 30},
            "environment": {"backend": "cuda", "kernel_paths": kernel_paths}}


class ReduceRun(unittest.TestCase):
    def test_steps_after_warmup(self):
        out = engine_run.reduce_run(exported({}), {"batch_size": 512}, warmup=1)
        self.assertEqual(out["steps"], 3)
        self.assertEqual(out["median_step_ms"], 11.0)
        self.assertAlmostEqual(out["samples_per_s"], 512e3 / 11.0)
        self.assertEqual(out["median_data_wait_ms"], 1.0)
        self.assertAlmostEqual(out["samples_per_s_without_data_wait"], 512e3 / 10.0)
        self.assertEqual(out["peak_allocated_bytes"], 1 << 30)
        self.assertNotIn("conv_workspace_max_bytes", out)

    def test_largest_conv_workspace(self):
        paths = {"convolution": {
            "fprop N=512 C=64 autotuned": {"path": "cudnn", "plan": "a", "workspace_bytes": 0},
            "wgrad N=512 C=64 autotuned": {"path": "cudnn", "plan": "b",
                                           "workspace_bytes": 37 << 20},
            "dgrad N=512 C=64 autotuned": {"path": "cudnn", "plan": "c",
                                           "chosen_by": "not yet autotuned"}},
            "pooling": {"x": {"path": "fast"}}}
        out = engine_run.reduce_run(exported(paths), {"batch_size": 512}, warmup=1)
        self.assertEqual(out["conv_workspace_max_bytes"], 37 << 20)
        self.assertEqual(len(engine_run.conv_workspaces(out["environment"])), 2)

    def test_cpu_paths_have_no_workspace(self):
        paths = {"convolution": {"N=64 C=1": {"path": "blas", "chosen_by": "rule"}}}
        out = engine_run.reduce_run(exported(paths), {"batch_size": 64}, warmup=1)
        self.assertNotIn("conv_workspace_max_bytes", out)


if __name__ == "__main__":
    unittest.main()
