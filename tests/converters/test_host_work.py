"""Accuracy work (reference, calibration, validation) runs with the threads this host is fastest with
and several small samples per run where the model takes them alike; timing keeps the profile's threads."""
import numpy as np
import pytest

from edgeopt_converters import host_work


@pytest.mark.parametrize("elements, batch", [(3 * 224 * 224, 1), (48 * 320 * 3, 1), (512, 64), (128 * 64, 8),
                                             (1, 64)])
def test_small_inputs_are_fed_many_per_run_and_images_one(elements, batch):
    assert host_work.batch_for(elements) == batch


class _Clock:
    """perf_counter for the probe: each call of a run advances it by that run's cost."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("one, many, chosen", [(0.020, 0.005, 2), (0.010, 0.030, 1), (0.010, 0.009, 1)])
def test_all_cores_are_used_only_where_clearly_faster(monkeypatch, one, many, chosen):
    clock = _Clock()
    monkeypatch.setattr(host_work.time, "perf_counter", clock)
    cost = {1: one, 2: many}

    def make(threads):
        def run():
            clock.now += cost[threads]
        return run

    threads, why = host_work.choose_threads(make, cores=2)
    assert threads == chosen
    assert f"{one * 1e3:.0f} ms" in why and f"{many * 1e3:.0f} ms" in why


def test_one_core_is_never_probed():
    assert host_work.choose_threads(lambda t: pytest.fail("no probe on one core"), cores=1) == (1, "")


def test_a_model_that_mixes_samples_of_a_batch_is_fed_one_at_a_time():
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((8, 4)).astype(np.float32)}

    def per_sample(f):
        return [np.tanh(f["x"]) * 2]

    def batch_norm_over_the_batch(f):
        x = f["x"]
        return [(x - x.mean(0)) / (x.std(0) + 1e-6)]

    assert host_work.same_per_sample(per_sample, feed, batch=8, base=1)
    assert not host_work.same_per_sample(batch_norm_over_the_batch, feed, batch=8, base=1)


def test_the_axis_that_doubles_with_twice_the_samples_is_theirs():
    one = [np.zeros((20, 1, 37)), np.zeros((1, 10)), np.zeros((2, 1, 128)), np.zeros((5,))]
    two = [np.zeros((20, 2, 37)), np.zeros((2, 10)), np.zeros((2, 2, 128)), np.zeros((5,))]
    assert host_work.sample_axes(one, two, 2) == (1, 0, 1, 0)  # an output that does not grow keeps axis 0
    assert host_work.sample_axes([np.zeros((1, 1))], [np.zeros((2, 2))], 2) == (0,)  # two axes grew: not told


def test_outputs_are_probed_only_where_axis_0_is_not_one_sample_and_a_refusal_keeps_axis_0():
    one, two = {"x": np.zeros((1, 4), np.float32)}, {"x": np.zeros((2, 4), np.float32)}
    time_major = lambda f: [np.zeros((7, len(f["x"]), 3))]  # noqa: E731
    assert host_work.probe_sample_axes(time_major, time_major(one), two) == (1,)
    calls = []
    batch_first = lambda f: calls.append(len(f["x"])) or [np.zeros((len(f["x"]), 3))]  # noqa: E731
    assert host_work.probe_sample_axes(batch_first, batch_first(one), two) == () and calls == [1]

    def one_at_a_time(f):
        if len(f["x"]) > 1:
            raise RuntimeError("Got invalid dimensions for input: x")
        return [np.zeros((7, 1, 3))]

    assert host_work.probe_sample_axes(one_at_a_time, one_at_a_time(one), two) == ()


def test_a_time_major_output_is_judged_on_every_step_of_every_sample(tmp_path):
    """A CTC reader exported as PyTorch's CTC loss wants it, [T, N, C]: sliced on axis 0 it kept one step per
    sample (a CRNN's 20 steps judged on 1, as a tensor); its samples are found on axis 1 and moved first."""
    import edgeopt
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    steps, classes = 16, 6
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["steps"], perm=[2, 0, 1]),
         helper.make_node("MatMul", ["steps", "w"], ["scores"]), helper.make_node("Add", ["scores", "b"], ["logits"])],
        "reader", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, steps])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [steps, "N", classes])],
        [numpy_helper.from_array(rng.standard_normal((8, classes)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 1.5], np.float32), "b")])  # the blank, last, wins most steps
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "reader.onnx"))
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((64, 8, steps)).astype(np.float32))
    manifest = edgeopt.convert(str(tmp_path / "reader.onnx"), device="x86-64", output_dir=tmp_path / "out",
                               eval_data=str(tmp_path / "data.npz"), precisions=["fp32"], time_on_host=False)
    assert any("output 0 on its axis 1" in note for note in manifest["notes"])
    judged = manifest["artifacts"][0]["accuracy"]["outputs"][0]
    assert judged["kind"] == "ctc" and "64/64 strings" in manifest["artifacts"][0]["accuracy"]["reason"]
    symbols = int(manifest["artifacts"][0]["accuracy"]["reason"].split("none of ")[1].split(",")[0])
    assert symbols > 64  # every step decoded, not one a sample


def test_a_stateful_model_with_a_time_major_output_is_streamed_samples_first(tmp_path):
    """Its state [N, 8] fed back as it is, its [T, N, C] scores judged per sample when streamed too."""
    import edgeopt
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    steps, classes = 5, 3
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Add", ["z", "state"], ["mixed"]),
         helper.make_node("Reshape", ["mixed", "shape"], ["per_step"]),
         helper.make_node("Transpose", ["per_step"], ["logits"], perm=[1, 0, 2]),
         helper.make_node("Tanh", ["mixed"], ["state_out"])],
        "streamer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                     helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", steps * classes])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [steps, "N", classes]),
         helper.make_tensor_value_info("state_out", TensorProto.FLOAT, ["N", steps * classes])],
        [numpy_helper.from_array(rng.standard_normal((4, steps * classes)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([-1, steps, classes], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "streamer.onnx"))
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((32, 4)).astype(np.float32),
             state=np.zeros((32, steps * classes), np.float32))
    manifest = edgeopt.convert(str(tmp_path / "streamer.onnx"), device="x86-64", output_dir=tmp_path / "out",
                               eval_data=str(tmp_path / "data.npz"), precisions=["fp32"], time_on_host=False,
                               state={"state": "state_out"}, output_kinds={"logits": "sequence"})
    accuracy = manifest["artifacts"][0]["accuracy"]
    assert accuracy["verdict"] == "ok" and any("output 0 on its axis 1" in n for n in manifest["notes"])
    streamed = {o["name"]: o for o in accuracy["streamed"]["outputs"]}
    assert streamed["logits@stream"]["verdict"] == "ok" and accuracy["streamed"]["steps"] > 1


def test_streamed_steps_stack_samples_first_and_feed_the_state_back_as_the_model_gave_it():
    from edgeopt_converters.accuracy.streaming import stream
    from edgeopt_converters.source.tensors import Dataset

    fed = []

    def predict(feed):
        fed.append(feed["state"].shape)
        n = len(feed["x"])
        return [np.zeros((5, n, 3), np.float32), np.ones((2, n, 4), np.float32)]  # [T, N, C], state [layers, N, H]

    data = Dataset({"x": np.zeros((6, 4), np.float32), "state": np.zeros((6, 2, 4), np.float32)}, None, "test")
    outputs = stream(predict, data, 1, {"state": "state_out"}, ["logits", "state_out"], steps=6, sample_axes=(1, 1))
    assert outputs[0].shape == (6, 5, 3) and outputs[1].shape == (6, 2, 4)  # one row per step, samples first
    assert fed[1:] == [(2, 1, 4)] * 5  # what the model returned, not the moved copy
