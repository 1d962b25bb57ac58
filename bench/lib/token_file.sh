# random_token_file DIR N VOCAB SEED: DIR/train.bin, N random tokens below VOCAB in llm.c's token-file
# format (a 256-int32 header: magic 20240520, version 1, count; then uint16 tokens). Sourced by the
# bench scripts; needs PY.
random_token_file() {
  "$PY" - "$@" <<'PYEOF'
import os, random, struct, sys
out, n, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(out, exist_ok=True)
rng = random.Random(seed)
with open(os.path.join(out, "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(rng.randrange(vocab) for _ in range(n))))
PYEOF
}
