"""The zoo's architectures in PyTorch, and the inputs a zoo model's ONNX file declares.

torch_models() builds the same architectures ../shared/models/make_zoo.py exported (torchvision, timm,
transformers, torch.nn's LSTM and GRU), with fresh random weights: timing does not depend on the
values. bench/torch_compare.py and bench/gpu_peers.py both time them beside kiln, so the
constructors live here, once.

zoo_dims() and zoo_inputs() say what to feed one of them: the ONNX file's inputs in order, their
element types, and a size for each symbolic dimension (the batch as asked, the others as the
model's first data set has them), so PyTorch gets the shapes and dtypes kiln gets from `--dim`.
"""
import os


def torch_models():
    """name: (constructor, convolutional over images (worth trying channels_last))."""
    import torch
    import torchvision
    import timm
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    class Bert(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.m = BertModel(BertConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                       intermediate_size=1024))

        def forward(s, ids, mask, tt):
            o = s.m(input_ids=ids, attention_mask=mask, token_type_ids=tt)
            return o.last_hidden_state, o.pooler_output

    class Gpt2(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.m = GPT2Model(GPT2Config(vocab_size=8192, n_embd=256, n_layer=2, n_head=4, n_positions=512))

        def forward(s, ids):
            return s.m(input_ids=ids, use_cache=False).last_hidden_state

    class Whisper(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.e = WhisperEncoder(WhisperConfig(d_model=256, encoder_layers=2, encoder_attention_heads=4,
                                               encoder_ffn_dim=1024, num_mel_bins=80, max_source_positions=1500))

        def forward(s, f):
            return s.e(f).last_hidden_state

    class Rnn(torch.nn.Module):  # cuDNN's LSTM and GRU
        def __init__(s):
            super().__init__()
            s.lstm = torch.nn.LSTM(40, 96, num_layers=2, batch_first=True)
            s.gru = torch.nn.GRU(96, 64, batch_first=True, bidirectional=True)
            s.fc = torch.nn.Linear(128, 10)

        def forward(s, x):
            y, _ = s.lstm(x)
            y, _ = s.gru(y)
            return s.fc(y)

    class FieldConv1dGemm(torch.nn.Module):  # the field reports' Conv1d + bias + ReLU stack and 128->1152 Linear
        def __init__(s):
            super().__init__()
            s.conv = torch.nn.Sequential(torch.nn.Conv1d(16, 32, 5, padding=2), torch.nn.ReLU(),
                                         torch.nn.Conv1d(32, 32, 3, stride=2, dilation=2, padding=2),
                                         torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Conv1d(32, 128, 1))
            s.fc = torch.nn.Linear(128, 1152)
            s.fc2 = torch.nn.Linear(1152, 10)

        def forward(s, sig):
            h = s.conv(sig).mean(dim=2)
            return s.fc2(torch.relu(s.fc(h)))

    return {
        "mobilenet_v3_small": (torchvision.models.mobilenet_v3_small, True),
        "efficientnet_b0": (torchvision.models.efficientnet_b0, True),
        "vit_tiny": (lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False), False),
        "bert_mini": (Bert, False),
        "gpt2_tiny_dynamo": (Gpt2, False),
        "whisper_tiny_encoder": (Whisper, False),
        "lstm_gru": (Rnn, False),
        "field_conv1d_gemm": (FieldConv1dGemm, False),
    }


def onnx_signature(model_path):
    """(inputs, outputs) of the graph, each a list of (name, dims, numpy dtype); a dim is an int,
    a symbol's name (str), or None when the file gives neither. Initializers are not inputs."""
    import onnx
    from onnx import helper
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}

    def info(v):
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
        return v.name, dims, helper.tensor_dtype_to_np_dtype(t.elem_type)
    return [info(v) for v in m.graph.input if v.name not in inits], [info(v) for v in m.graph.output]


def _data_set_0(model_dir, count):
    """The first data set's input arrays, or None where the folder has none."""
    d = os.path.join(model_dir, "test_data_set_0")
    if not all(os.path.isfile(os.path.join(d, f"input_{k}.pb")) for k in range(count)):
        return None
    import onnx
    from onnx import numpy_helper
    arrays = []
    for k in range(count):
        t = onnx.TensorProto()
        with open(os.path.join(d, f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(t))
    return arrays


def zoo_batch(model_dir):
    """The batch the file fixes (an int), or the batch dimension's symbol (str): the first dim of
    the first input, which is the batch in every zoo model."""
    ins, _ = onnx_signature(os.path.join(model_dir, "model.onnx"))
    return ins[0][1][0] if ins and ins[0][1] else 1


def zoo_dims(model_dir, batch):
    """{symbol: size} for every symbolic input dimension: the batch symbol gets `batch`, any other
    the size the first data set has there (sequence lengths, time steps). Raises ValueError for a
    symbol no data set sizes, or a dimension with neither size nor name (kiln's --dim cannot set it)."""
    ins, _ = onnx_signature(os.path.join(model_dir, "model.onnx"))
    b = zoo_batch(model_dir)
    dims = {b: batch} if isinstance(b, str) else {}
    ref = _data_set_0(model_dir, len(ins))
    for k, (name, shape, _) in enumerate(ins):
        for axis, d in enumerate(shape):
            if d is None:
                raise ValueError(f"input {name} dimension {axis} has no size and no name")
            if isinstance(d, str) and d not in dims:
                if ref is None or ref[k].ndim != len(shape):
                    raise ValueError(f"input {name} dimension {axis} ('{d}') is symbolic and no data set sizes it")
                dims[d] = int(ref[k].shape[axis])
    return dims


def zoo_inputs(model_dir, dims):
    """Numpy arrays for the file's inputs, in order, of the declared dtypes and the shapes `dims`
    resolves: the first data set's values repeated along the batch (so token ids stay in the
    vocabulary and masks stay masks), or, where a shape differs from the data set's beyond the
    batch, standard normal floats and zero integers (a valid id in any embedding)."""
    import numpy as np
    ins, _ = onnx_signature(os.path.join(model_dir, "model.onnx"))
    ref = _data_set_0(model_dir, len(ins))
    rng = np.random.default_rng(0)
    arrays = []
    for k, (name, shape, dt) in enumerate(ins):
        shape = tuple(dims[d] if isinstance(d, str) else d for d in shape)
        r = ref[k] if ref is not None else None
        if r is not None and r.dtype == dt and r.ndim == len(shape) == 0:
            a = r
        elif r is not None and r.dtype == dt and r.ndim == len(shape) and r.shape[1:] == shape[1:] and r.shape[0] > 0:
            a = np.concatenate([r] * -(-shape[0] // r.shape[0]))[:shape[0]]
        elif np.issubdtype(dt, np.floating):
            a = rng.standard_normal(shape).astype(dt)
        else:
            a = np.zeros(shape, dt)
        arrays.append(np.ascontiguousarray(a))
    return arrays
