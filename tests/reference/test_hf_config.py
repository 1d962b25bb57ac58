"""A checkpoint's Hugging Face config.json (GPT2LMHeadModel): its keys are GPT2Config's documented
ones with the model's sizes, and the independent PyTorch reference built from config.json alone (not
from lattice's flags) loads model.safetensors and gives the loss `lattice eval` gives.

Usage: python3 test_hf_config.py <lattice-binary> <scratch-dir>
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError:  # pyenv or venv interpreters on PATH may lack Debian's python3-torch
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("python3-torch is not installed (apt-get install python3-torch)")
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402

# GPT2Config's keys (transformers' documentation) and the values lattice's model has.
REQUIRED = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "n_inner": None, "tie_word_embeddings": True, "scale_attn_weights": True}
SIZES = {"vocab_size": 200, "n_positions": 32, "n_embd": 64, "n_layer": 3, "n_head": 4}


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    rng = np.random.default_rng(5)
    data = os.path.join(scratch, "data")
    os.makedirs(data)
    tokens = rng.integers(0, 200, 20000).astype("<u2")
    ref.write_llmc_tokens(os.path.join(data, "train.bin"), tokens[:18000])
    ref.write_llmc_tokens(os.path.join(data, "val.bin"), tokens[18000:])
    ck = os.path.join(scratch, "ck")
    subprocess.run([binary, "train", "--data", data, "--layers", "3", "--hidden", "64", "--heads", "4",
                    "--seq-len", "32", "--vocab", "200", "--dropout", "0.1", "--micro-batch", "2", "--steps", "3",
                    "--threads", "2", "--save", ck], check=True, capture_output=True)
    config = json.load(open(os.path.join(ck, "config.json")))
    failures = []
    for key, want in list(REQUIRED.items()) + list(SIZES.items()):
        if config.get(key, "missing") != want:
            failures.append(f"config.json {key}: {config.get(key, 'missing')!r}, want {want!r}")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if config.get(key) != 0.1:
            failures.append(f"config.json {key}: {config.get(key)!r}, want the run's dropout 0.1")
    # The reference model from config.json's sizes alone, and lattice's loss on the same rows.
    model = ref.from_checkpoint(os.path.join(ck, "model.safetensors"), config["n_layer"], config["n_embd"],
                                config["n_head"], config["n_positions"], config["vocab_size"], dtype=torch.float64)
    model.eval()
    val = ref.read_llmc_tokens(os.path.join(data, "val.bin"))
    out = subprocess.run([binary, "eval", "--checkpoint", ck, "--data", os.path.join(data, "val.bin"),
                          "--batches", "1", "--micro-batch", "4", "--json"], check=True, capture_output=True, text=True)
    lattice_loss = json.loads(out.stdout.strip().splitlines()[-1])["loss"]
    x = torch.tensor(np.stack([val[i * 32:(i + 1) * 32] for i in range(4)]).astype(np.int64))
    y = torch.tensor(np.stack([val[i * 32 + 1:(i + 1) * 32 + 1] for i in range(4)]).astype(np.int64))
    with torch.no_grad():
        _, loss = model(x, y)
    print(f"loss: lattice eval {lattice_loss:.8f}, reference from config.json {loss.item():.8f}")
    if abs(loss.item() - lattice_loss) > 1e-5 * abs(loss.item()):
        failures.append(f"the reference built from config.json gives loss {loss.item()}, lattice eval {lattice_loss}")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("ok: config.json holds GPT2Config's keys and sizes, and its sizes load the weights")


if __name__ == "__main__":
    main()
