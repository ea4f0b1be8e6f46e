#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""check_predictions.py's verdicts on a made-up kernel table, and the committed
predictions file's form (every regular expression compiles, ranges ordered)."""
import json
import os
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import check_predictions as cp  # noqa: E402

TSV = """# step 5 of 5 traced: 9000 us on the host clock, 6000 us of GPU work in 64 launches
# kind\tlaunches\ttotal_us\tshare_of_gpu_work\tname
kernel\t20\t250.0\t0.04\t_ZN2tb4cuda12_GLOBAL__N_122bn_stats_reduce_kernelI13__nv_bfloat16Li8EEEvNS_9batchnorm10ReducePlanEPKT_PNS1_4SumsE
kernel\t20\t900.0\t0.15\tvoid tb::cuda::(anonymous namespace)::bn_apply_kernel<__nv_bfloat16, true, 4>(...)
kernel\t4\t40.0\t0.01\tcast_f32_bf16_kernel
kernel\t20\t4810.0\t0.80\tsm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc
"""


def prediction(match, launches, ms):
    return {"name": match, "match": match, "launches": launches, "ms": ms}


class Verdicts(unittest.TestCase):
    def setUp(self):
        f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
        f.write(TSV)
        f.close()
        self.rows = cp.read_kernels(f.name)
        os.unlink(f.name)

    def test_rows(self):
        self.assertEqual(len(self.rows), 4)
        self.assertEqual(self.rows[1][1:], (20, 900.0))

    def test_held_in_a_mangled_name(self):
        v = cp.judge(prediction("bn_stats_reduce_kernel", [20, 20], [0.15, 0.3]), self.rows)
        self.assertEqual((v["verdict"], v["launches"], v["ms"]), ("held", 20, 0.25))

    def test_slower_and_faster(self):
        self.assertEqual(cp.judge(prediction("bn_apply_kernel", [20, 20], [0.35, 0.6]), self.rows)["verdict"], "slower")
        self.assertEqual(cp.judge(prediction("bn_apply_kernel", [20, 20], [1.0, 2.0]), self.rows)["verdict"], "faster")

    def test_launches_differ(self):
        v = cp.judge(prediction("cast_(f32_bf16|bf16_f32)_kernel", [44, 44], [0.0, 0.2]), self.rows)
        self.assertEqual((v["verdict"], v["launches"]), ("launches differ", 4))

    def test_no_match_and_everything(self):
        self.assertEqual(cp.judge(prediction("bn_backward_dx_kernel", [20, 20], [0.5, 0.9]), self.rows)["verdict"],
                         "no kernel matched")
        v = cp.judge(prediction(".", None, [5.5, 9.0]), self.rows)
        self.assertEqual((v["verdict"], v["launches"]), ("held", 64))

    def test_committed_predictions(self):
        folder = os.path.join(here, "predictions")
        for name in sorted(os.listdir(folder)):
            preds = json.load(open(os.path.join(folder, name)))["predictions"]
            self.assertTrue(preds, name)
            for p in preds:
                cp.re.compile(p["match"])
                self.assertLessEqual(p["ms"][0], p["ms"][1], p["name"])
                if p["launches"] is not None:
                    self.assertLessEqual(p["launches"][0], p["launches"][1], p["name"])
                self.assertTrue(p["why"], p["name"])


if __name__ == "__main__":
    unittest.main()
