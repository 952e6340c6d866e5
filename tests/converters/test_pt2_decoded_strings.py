"""Fourth round: what torch decodes again or resolves by name is rebuilt by edgeopt, and what a .pt2
declares is bounded before it is inflated.

As in test_pt2_archive_tricks.py, each trick is first shown to work against torch alone (a module
imported, a file read into the model's output, gigabytes inflated), then refused by the first wall.
"""
import copy
import io
import json
import subprocess
import sys
import textwrap
import uuid
import zipfile

import pytest
import torch

from edgeopt_agent.errors import UserError
from edgeopt_converters.source.pt2_guard import checked_archive
from edgeopt_converters.source.pt2_program import ProgramRefused, rewrite_program
from edgeopt_converters.source.pt2_treespec import TreeSpecRefused, regenerate
from pt2_tricks import convert_trick, edit_program, load_bare, rewrite, save_branchy

MiB = 1 << 20


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    return save_branchy(tmp_path_factory.mktemp("pt2") / "good.pt2")


def program_of(archive):
    """The program JSON inside an archive (a path or the bytes of one)."""
    with zipfile.ZipFile(archive) as reader:
        name = next(n for n in reader.namelist() if n.endswith("models/model.json"))
        return json.loads(reader.read(name))


# --- Tree specs: JSON inside the JSON, decoded by torch with an object hook that imports modules ---

def escaped_enum(module):
    """An output spec whose context hides `__enum__` behind JSON escapes: torch's decoder reads the key,
    imports `module` and walks its attributes."""
    context = ('[{"\\u005f\\u005fenum\\u005f\\u005f": true, "fqn": "%s:os", "name": "x"}]' % module)

    def change(program):
        signature = program["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(signature["out_spec"])
        spec[1] = {"type": "builtins.dict", "context": context, "children_spec": []}
        signature["out_spec"] = json.dumps(spec)
    return edit_program(change)


@pytest.fixture
def payload_module(tmp_path, monkeypatch):
    """A module that creates a marker when imported, on the import path: (its name, the marker)."""
    name = f"edgeopt_trick_{uuid.uuid4().hex}"
    marker = tmp_path / "IMPORTED"
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(folder))
    return name, marker


def test_an_escaped_enum_in_a_tree_spec_imports_a_module_in_a_bare_torch_load(good_pt2, tmp_path, payload_module):
    module, marker = payload_module
    load_bare(rewrite(good_pt2, tmp_path / "evil.pt2", escaped_enum(module)), call=False)
    assert marker.exists()


def test_an_escaped_enum_in_a_tree_spec_is_refused(good_pt2, tmp_path, payload_module, capsys):
    module, marker = payload_module
    code, errors, err, _, out = convert_trick(lambda m, g: escaped_enum(module), good_pt2, tmp_path, capsys)
    assert code == 2 and len(errors) == 1 and "input/output spec edgeopt does not read" in errors[0], err
    assert not marker.exists()
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("spec", [
    [1, {"type": "builtins.dict", "context": '{"__enum__": true, "fqn": "os:environ", "name": "HOME"}',
         "children_spec": []}],
    [1, {"type": "builtins.dict", "context": '[{"__enum__": true, "fqn": "os:environ", "name": "HOME"}]',
         "children_spec": [{"type": None, "context": None, "children_spec": []}]}],
    [1, {"type": "builtins.list", "context": '[{"a": 1}]', "children_spec": []}],
    [1, {"type": "collections.defaultdict", "context": "null", "children_spec": []}],
    [1, {"type": "collections.namedtuple", "context": "os:system", "children_spec": []}],
    [1, {"type": None, "context": "[]", "children_spec": []}],
    [1, {"type": "builtins.tuple", "context": "null", "children_spec": [], "extra": 1}],
    [True, {"type": None, "context": None, "children_spec": []}],
])
def test_tree_specs_other_than_plain_containers_are_refused(spec):
    with pytest.raises(TreeSpecRefused):
        regenerate(json.dumps(spec))


def test_a_tree_spec_is_written_anew_from_edgeopt_s_reading():
    text = json.dumps([1, {"type": "builtins.dict", "context": '[ "a" , 3 ]', "children_spec": [
        {"type": None, "context": None, "children_spec": []},
        {"type": "builtins.tuple", "context": " null ", "children_spec": []}]}])
    written = regenerate(text)
    assert json.loads(written) == [1, {"type": "builtins.dict", "context": '["a", 3]', "children_spec": [
        {"type": None, "context": None, "children_spec": []},
        {"type": "builtins.tuple", "context": "null", "children_spec": []}]}]
    assert regenerate(written) == written


def test_dict_inputs_and_outputs_survive_the_rebuild(tmp_path):
    class DictModel(torch.nn.Module):
        def forward(self, x, extra):
            return {"sum": x + extra["y"], "pair": (x * 2, extra["y"])}

    args = (torch.randn(2, 3), {"y": torch.randn(2, 3)})
    path = tmp_path / "dict.pt2"
    torch.export.save(torch.export.export(DictModel(), args), str(path))
    loaded = torch.export.load(checked_archive(path)).module()
    expected = DictModel()(*args)
    got = loaded(*args)
    assert torch.equal(got["sum"], expected["sum"]) and torch.equal(got["pair"][0], expected["pair"][0])


# --- Node metadata: torch resolves source functions by name and decodes `custom` and `from_node` ---

def test_node_metadata_keeps_only_a_plain_module_stack(good_pt2, tmp_path):
    def change(program):
        for node in program["graph_module"]["graph"]["nodes"]:
            node["metadata"].update(stack_trace="File \"x\", line 1, in f\n  code", torch_fn="a;b",
                                    source_fn_stack="linear,torch.os.system", custom='{"k": 1}', from_node="[]")
        program["graph_module"]["graph"]["nodes"][0]["metadata"]["nn_module_stack"] = "a,b,os:system"
        program["graph_module"]["metadata"] = {"custom": '{"k": 1}'}
    evil = rewrite(good_pt2, tmp_path / "meta.pt2", edit_program(change))
    rewritten = program_of(checked_archive(evil))
    nodes = rewritten["graph_module"]["graph"]["nodes"]
    assert nodes[0]["metadata"] == {}  # a stack with a path torch would not write: dropped
    assert nodes[1]["metadata"] == {"nn_module_stack": "L__self__,,pt2_tricks.Branchy;"
                                                       "L__self__linear,linear,torch.nn.modules.linear.Linear"}
    assert rewritten["graph_module"]["metadata"] == {}
    assert torch.export.load(checked_archive(evil)).module()(torch.randn(8, 3)).shape == (4, 3)


# --- Operators that touch files, and operators torch's verifier would have to stop ---

def from_file_payload(secret):
    """A node that reads `secret` into a tensor which flows into the model's output (its byte sum is
    added to every output element)."""
    def change(program):
        graph = program["graph_module"]["graph"]
        meta = copy.deepcopy(graph["tensor_values"]["x"])
        meta.update(dtype=1, sizes=[{"as_int": secret.stat().st_size}], strides=[{"as_int": 1}])
        graph["tensor_values"]["leaked"] = meta
        graph["tensor_values"]["leaked_sum"] = dict(copy.deepcopy(meta), sizes=[], strides=[], dtype=7)
        graph["nodes"][:0] = [
            {"target": "torch.ops.aten.from_file.default", "name": "leaked", "metadata": {},
             "is_hop_single_tensor_return": None, "outputs": [{"as_tensor": {"name": "leaked"}}],
             "inputs": [{"name": "filename", "arg": {"as_string": str(secret)}, "kind": 1},
                        {"name": "shared", "arg": {"as_bool": False}, "kind": 1},
                        {"name": "size", "arg": {"as_int": secret.stat().st_size}, "kind": 1},
                        {"name": "dtype", "arg": {"as_scalar_type": 1}, "kind": 2}]},
            {"target": "torch.ops.aten.sum.default", "name": "leaked_sum", "metadata": {},
             "is_hop_single_tensor_return": None, "outputs": [{"as_tensor": {"name": "leaked_sum"}}],
             "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "leaked"}}, "kind": 1},
                        {"name": "dtype", "arg": {"as_scalar_type": 7}, "kind": 2}]},
            {"target": "torch.ops.aten.add.Tensor", "name": "x_leaked", "metadata": {},
             "is_hop_single_tensor_return": None, "outputs": [{"as_tensor": {"name": "x_leaked"}}],
             "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                        {"name": "other", "arg": {"as_tensor": {"name": "leaked_sum"}}, "kind": 1}]}]
        graph["tensor_values"]["x_leaked"] = copy.deepcopy(graph["tensor_values"]["x"])
        graph["nodes"][3]["inputs"][0]["arg"]["as_tensor"]["name"] = "x_leaked"  # slice reads x + leaked sum
    return edit_program(change)


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"root-only-secret")
    path.chmod(0o600)
    return path


def test_from_file_puts_a_file_into_the_output_of_a_bare_torch_load(good_pt2, tmp_path, secret):
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", from_file_payload(secret))
    module = torch.export.load(str(evil)).module()
    x = torch.zeros(8, 3)
    secret_sum = float(sum(secret.read_bytes()))
    assert torch.allclose(module(x), torch.export.load(str(good_pt2)).module()(x + secret_sum))


def test_from_file_is_refused(good_pt2, tmp_path, secret, capsys):
    code, errors, err, _, _ = convert_trick(lambda m, g: from_file_payload(secret), good_pt2, tmp_path, capsys)
    assert code == 2 and len(errors) == 1 and "reads or writes a file" in errors[0], err


@pytest.mark.parametrize("target", [
    "torch.ops.aten.from_file.default", "torch.ops.aten.save.default", "torch.ops.aten.from_file",
    "torch.ops.higher_order.aoti_call_delegate", "torch.ops.higher_order.call_torchbind",
    "torch.ops.higher_order.flat_apply", "_operator.attrgetter", "_operator.methodcaller", "_operator.call",
    "math.sys", "torch.load", "torch.ops.aten.add.Tensor\n", "torch.sym_int.__globals__",
])
def test_operators_outside_the_exact_rule_are_refused(good_pt2, target):
    program = program_of(good_pt2)
    program["graph_module"]["graph"]["nodes"][0]["target"] = target
    with pytest.raises(ProgramRefused):
        rewrite_program(program)


@pytest.mark.parametrize("target", ["torch.ops.aten.add.Tensor", "torch.ops.higher_order.cond", "_operator.getitem",
                                    "math.trunc", "torch.sym_max", "torch.ops.prims.convert_element_type.default"])
def test_torch_s_own_operators_pass(good_pt2, target):
    program = program_of(good_pt2)
    program["graph_module"]["graph"]["nodes"][0]["target"] = target
    rewrite_program(program)


@pytest.mark.parametrize("verifiers", [[], ["EDGE"], "TRAINING", ["TRAINING", {"x": 1}]])
def test_verifiers_come_from_a_short_list(good_pt2, verifiers):
    program = program_of(good_pt2)
    program["verifiers"] = verifiers
    with pytest.raises(ProgramRefused, match="verifiers"):
        rewrite_program(program)


# --- Member names: no '.' or '..' parts ---

@pytest.mark.parametrize("member", ["extra/..", "extra/.", "extra//notes", "data/../extra/x", "extra\\notes"])
def test_member_names_with_dot_parts_are_refused(good_pt2, tmp_path, member):
    def edit(name, data):
        return [(name, data)] + ([(member, b"text")] if name == "archive_format" else [])
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", edit)
    with pytest.raises(UserError, match="not a plain path"):
        checked_archive(evil)


# --- Payload configs: each tensor within its own file ---

@pytest.mark.parametrize("change", [
    lambda meta: meta["tensor_meta"].update(sizes=[{"as_int": 1 << 20}], strides=[{"as_int": 1}]),
    lambda meta: meta["tensor_meta"].update(storage_offset={"as_int": 10 ** 6}),
    lambda meta: meta["tensor_meta"].update(layout=1),
    lambda meta: meta["tensor_meta"]["device"].update(type="privateuseone"),
    lambda meta: meta.update(extra={"__enum__": True}) or meta.pop("is_param"),
])
def test_payload_configs_describe_tensors_within_their_files(good_pt2, tmp_path, change):
    def edit(name, data):
        if name == "data/weights/model_weights_config.json":
            config = json.loads(data)
            change(config["config"]["linear.weight"])
            data = json.dumps(config).encode()
        return [(name, data)]
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", edit)
    with pytest.raises(UserError, match="plain CPU tensor"):
        checked_archive(evil)


def test_an_empty_weight_file_becomes_zeros_of_the_declared_size_in_a_bare_torch_load(good_pt2, tmp_path):
    """Why an empty payload must hold an empty tensor: torch allocates what the config declares."""
    def edit(name, data):
        if name == "data/weights/model_weights_config.json":
            config = json.loads(data)
            config["config"]["linear.bias"]["tensor_meta"].update(sizes=[{"as_int": 1 << 24}])
            data = json.dumps(config).encode()
        return [(name, b"" if name == "data/weights/weight_1" else data)]
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", edit)
    try:
        loaded = torch.export.load(str(evil))
    except RuntimeError:
        pytest.fail("torch no longer loads an empty weight file: the check below may be moot")
    assert loaded.state_dict["linear.bias"].numel() == 1 << 24
    with pytest.raises(UserError, match="plain CPU tensor"):
        checked_archive(evil)


# --- Memory: what members declare is bounded by the file's size before anything is inflated ---

def deflated_member(good, evil, member, size):
    """`good` plus `member`: `size` bytes of zeros, deflated (about a thousandth of that on disk)."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        folder = src.namelist()[0].split("/", 1)[0]
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        info = zipfile.ZipInfo(f"{folder}/{member}")
        info.compress_type = zipfile.ZIP_DEFLATED
        with dst.open(info, "w", force_zip64=True) as out:
            block = bytes(MiB)
            for _ in range(size // MiB):
                out.write(block)
    return evil


def sample_inputs_bomb(good, evil, size):
    """Sample inputs of `size` zero bytes, saved by torch.save and then deflated record by record: torch's
    reader inflates every record it reads."""
    stored = io.BytesIO()
    torch.save(((torch.zeros(size, dtype=torch.uint8),), {}), stored)
    deflated = io.BytesIO()
    with zipfile.ZipFile(stored) as inner_src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as inner:
        for info in inner_src.infolist():
            inner.writestr(info.filename, inner_src.read(info))
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            sample = info.filename.endswith("data/sample_inputs/model.pt")
            dst.writestr(info, deflated.getvalue() if sample else src.read(info))
    return deflated.getvalue()


def peak_growth(code, *args):
    """How far (bytes) a fresh Python's resident memory peaks above where it stood before running `code`,
    after importing torch. The kernel's peak is reset first (clear_refs 5): importing torch can itself peak
    higher than a later inflation, and a max over the whole process would then show no growth at all."""
    script = textwrap.dedent("""
        import sys
        import torch
        from edgeopt_converters.source import pt2_guard

        def status(field):
            for line in open("/proc/self/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = status("VmRSS")
        try:
            CODE
        except Exception as exc:
            print(type(exc).__name__, str(exc)[:300], file=sys.stderr)
        print(status("VmHWM") - before)
    """).replace("CODE", code)
    run = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.split()[-1]), run.stderr


BOMB = 256 * MiB


@pytest.mark.slow
def test_a_deflated_member_costs_its_inflated_size_in_a_bare_torch_load_and_is_refused_at_once(good_pt2, tmp_path):
    evil = deflated_member(good_pt2, tmp_path / "evil.pt2", "extra/notes", BOMB)
    assert evil.stat().st_size < 2 * MiB
    bare, said = peak_growth("torch.export.load(sys.argv[1])", evil)
    assert bare > BOMB * 3 // 4, (bare, said)  # torch inflates every extra/ member into memory
    guarded, err = peak_growth("pt2_guard.checked_archive(sys.argv[1])", evil)
    assert "UserError" in err and "members declare" in err
    assert guarded < 32 * MiB, guarded


@pytest.mark.slow
def test_deflated_sample_inputs_cost_their_inflated_size_in_torch_load_and_are_refused(good_pt2, tmp_path):
    inputs = sample_inputs_bomb(good_pt2, tmp_path / "evil.pt2", BOMB)
    assert len(inputs) < 2 * MiB
    loaded = torch.load(io.BytesIO(inputs), weights_only=True)
    assert loaded[0][0].numel() == BOMB  # inflated by torch's reader
    del loaded
    guarded, err = peak_growth("pt2_guard.checked_archive(sys.argv[1])", tmp_path / "evil.pt2")
    assert "UserError" in err and "torch.save file" in err
    assert guarded < 32 * MiB, guarded


def test_members_declaring_more_than_the_file_can_hold_are_refused_before_reading(good_pt2, tmp_path, monkeypatch):
    evil = deflated_member(good_pt2, tmp_path / "evil.pt2", "extra/notes", 64 * MiB)
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda *a, **k: pytest.fail("a member was inflated"))
    with pytest.raises(UserError, match="members declare"):
        checked_archive(evil)
