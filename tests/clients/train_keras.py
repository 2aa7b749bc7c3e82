"""Training a Keras 3 model on its torch backend (`KERAS_BACKEND=torch`), as Keras users do:
a tiny transformer language model of keras layers (`Embedding`, two blocks of
`MultiHeadAttention` + `LayerNormalization` + two `Dense`, a `Dense` head), built from
flags, seeded, nothing downloaded.

    python tests/clients/train_keras.py --steps 3 --loop fit
    memledger compare tests/clients/train_keras.py --steps-by forward --steps 2 \
        -p 'checkpoint:blocks.*' -- --loop custom

Keras' optimizers are not torch.optim optimizers (their `apply()` updates the variables
with torch ops of their own), so no `optimizer.step()` ends a step: trace it with
`--steps-by forward` (a step per root forward).

- `--loop fit`: `model.compile(optimizer="adam", loss=...)` then `model.fit(x, y,
  batch_size=..., epochs=1)` over `--steps` batches.
- `--loop custom`: a torch loop: `logits = model(x)`, `loss = loss_fn(y, logits)`,
  `model.zero_grad()`, `loss.backward()`, `optimizer.apply(grads, model.trainable_weights)`
  with `keras.optimizers.Adam()`; `--manual-gc`: Python's collector off, a collection at
  each step's end (as Megatron-LM's `--manual-gc`; Keras leaves each layer's inputs in
  reference cycles until a collection).
- `--loop train_step`: `model.compile` + `model.fit` on a `keras.Model` subclass whose
  `train_step` is its own (Keras' guide "customizing what happens in fit", torch backend).
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

VOCAB, DIM, HEADS, FF = 64, 32, 2, 64
BATCH, SEQ_LEN = 4, 16


class Block(keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.attn = keras.layers.MultiHeadAttention(HEADS, DIM // HEADS)
        self.norm1 = keras.layers.LayerNormalization()
        self.ff1 = keras.layers.Dense(FF, activation="gelu")
        self.ff2 = keras.layers.Dense(DIM)
        self.norm2 = keras.layers.LayerNormalization()

    def call(self, h):
        h = self.norm1(h + self.attn(h, h, use_causal_mask=True))
        return self.norm2(h + self.ff2(self.ff1(h)))


class LM(keras.Model):
    def __init__(self, depth: int, own_step: bool = False, **kw):
        super().__init__(**kw)
        self.own_step = own_step
        self.embed = keras.layers.Embedding(VOCAB, DIM)
        self.depth = depth
        for i in range(depth):   # attributes: torch's children `block_0`, `block_1`
            setattr(self, f"block_{i}", Block(name=f"block_{i}"))
        self.head = keras.layers.Dense(VOCAB)

    def call(self, tokens):
        h = self.embed(tokens)
        for i in range(self.depth):
            h = getattr(self, f"block_{i}")(h)
        return self.head(h)

    def train_step(self, data):
        if not self.own_step:
            return super().train_step(data)
        x, y = data
        logits = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=logits)
        self.zero_grad()
        loss.backward()
        grads = [v.value.grad for v in self.trainable_weights]
        with torch.no_grad():
            self.optimizer.apply(grads, self.trainable_weights)
        return {"loss": loss}


def data(steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    seq = rng.integers(0, VOCAB, (steps * BATCH, SEQ_LEN + 1)).astype("int64")
    return seq[:, :-1], seq[:, 1:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loop", default="fit", choices=["fit", "custom", "train_step"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--manual-gc", action="store_true")
    args = p.parse_args()
    keras.utils.set_random_seed(0)
    model = LM(args.depth, own_step=args.loop == "train_step")
    x, y = data(args.steps)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if args.loop in ("fit", "train_step"):
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss_fn)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        return
    opt = keras.optimizers.Adam(1e-3)
    if args.manual_gc:
        import gc
        gc.disable()
    for step in range(args.steps):
        xb = torch.as_tensor(x[step * BATCH:(step + 1) * BATCH])
        yb = torch.as_tensor(y[step * BATCH:(step + 1) * BATCH])
        logits = model(xb, training=True)
        loss = loss_fn(yb, logits)
        model.zero_grad()
        loss.backward()
        grads = [v.value.grad for v in model.trainable_weights]
        with torch.no_grad():
            opt.apply(grads, model.trainable_weights)
        print(f"step {step}  loss {loss.item():.4f}")
        if args.manual_gc:
            gc.collect()


if __name__ == "__main__":
    main()
