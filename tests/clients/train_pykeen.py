"""Knowledge-graph embeddings with pykeen, as its README and tutorials train them: a
TriplesFactory of labeled triples (random ones here, seeded: nothing downloaded), a model
built from config, and pykeen's own training loops and negative sampler.

    python tests/clients/train_pykeen.py --mode conve --epochs 2
    memledger trace tests/clients/train_pykeen.py --steps 2 -o conve.ledger -- --mode conve
    memledger compare tests/clients/train_pykeen.py --steps 2 \
        -p 'checkpoint:interaction.hr2d' -- --mode conve

Modes (`--mode`):

- `conve`: ConvE (its interaction a `hr2d` conv stack and a `hr1d` linear stack) trained
  with `LCWATrainingLoop` (1-N scoring against every entity, BCE after sigmoid), inverse
  triples, Adam, as pykeen's ConvE tutorial writes it.
- `ermlpe`: ER-MLP (E) (its interaction an MLP) with `SLCWATrainingLoop` and the basic
  negative sampler (2 corruptions per positive), margin ranking loss.
- `hole`: HolE (circular correlation by FFT: `rfft`, a conjugate, `irfft`) with
  `SLCWATrainingLoop` and the basic negative sampler.
- `rotate`: RotatE (complex embeddings) trained by hand: `model.score_hrt` on the positives
  and on the `BasicNegativeSampler`'s corruptions, the model's own loss
  (NSSA), `loss.backward()`, `optimizer.step()`, `model.post_parameter_update()`.
"""

import argparse

import numpy as np
import torch

from pykeen.models import ConvE, ERMLPE, HolE, RotatE
from pykeen.sampling import BasicNegativeSampler
from pykeen.training import LCWATrainingLoop, SLCWATrainingLoop
from pykeen.triples import TriplesFactory


def triples(n_entities: int, n_relations: int, n_triples: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.randint(n_entities, (n_triples,), generator=gen),
                       torch.randint(n_relations, (n_triples,), generator=gen),
                       torch.randint(n_entities, (n_triples,), generator=gen)], 1)
    labeled = np.array([[f"e{h}", f"r{r}", f"e{t}"] for h, r, t in ids.tolist()])
    return labeled


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="conve", choices=["conve", "ermlpe", "hole", "rotate"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--entities", type=int, default=40)
    p.add_argument("--relations", type=int, default=4)
    p.add_argument("--triples", type=int, default=64)
    args = p.parse_args()
    torch.manual_seed(0)
    labeled = triples(args.entities, args.relations, args.triples)
    if args.mode == "conve":
        tf = TriplesFactory.from_labeled_triples(labeled, create_inverse_triples=True)
        model = ConvE(triples_factory=tf, embedding_dim=args.dim, output_channels=4,
                      random_seed=0)
        loop = LCWATrainingLoop(model=model, triples_factory=tf,
                                optimizer=torch.optim.Adam(model.parameters(), lr=1e-3))
    elif args.mode in ("ermlpe", "hole"):
        tf = TriplesFactory.from_labeled_triples(labeled)
        model = ERMLPE(triples_factory=tf, embedding_dim=args.dim, hidden_dim=2 * args.dim,
                       random_seed=0) if args.mode == "ermlpe" else \
            HolE(triples_factory=tf, embedding_dim=args.dim, random_seed=0)
        loop = SLCWATrainingLoop(model=model, triples_factory=tf,
                                 optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
                                 negative_sampler="basic",
                                 negative_sampler_kwargs={"num_negs_per_pos": 2})
    else:
        rotate(args, TriplesFactory.from_labeled_triples(labeled))
        return
    losses = loop.train(triples_factory=tf, num_epochs=args.epochs,
                        batch_size=args.batch_size, use_tqdm=False)
    print("losses", [round(x, 4) for x in losses])


def rotate(args, tf: TriplesFactory) -> None:
    model = RotatE(triples_factory=tf, embedding_dim=args.dim, random_seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = BasicNegativeSampler(mapped_triples=tf.mapped_triples, num_negs_per_pos=4)
    gen = torch.Generator().manual_seed(1)
    for epoch in range(args.epochs):
        order = torch.randperm(tf.num_triples, generator=gen)
        for start in range(0, tf.num_triples, args.batch_size):
            pos = tf.mapped_triples[order[start:start + args.batch_size]]
            neg, _ = sampler.sample(pos)
            pos_scores = model.score_hrt(pos)
            neg_scores = model.score_hrt(neg.view(-1, 3)).view(len(pos), -1)
            loss = model.loss.process_slcwa_scores(pos_scores, neg_scores)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.post_parameter_update()
        print(f"epoch {epoch}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
