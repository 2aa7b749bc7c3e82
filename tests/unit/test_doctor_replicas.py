"""Note [Replicas that drift]: the ranks' `replica` records compared (pure)."""

from memledger.doctor.replicas import unsynced_gradients


def _rec(rank, step, rows, ddp=True):
    # rows: [index, name, grad sum, grad norm, weight sum, weight norm]
    return {"k": "replica", "rank": rank, "opt": 0, "step": step, "file": "t.py", "line": 9,
            "ddp": ddp, "params": rows}


def test_averaged_gradients_are_equal_on_every_rank_no_finding():
    rows = [[0, "w", 0.5, 2.0, 1.0, 3.0], [1, "b", -0.25, 0.5, 0.0, 1.0]]
    assert unsynced_gradients([[_rec(0, 1, rows)], [_rec(1, 1, rows)]]) == []


def test_different_gradients_at_equal_weights_are_one_error_for_the_job():
    r0 = [[0, "w", 0.5, 2.0, 1.0, 3.0], [1, "b", -0.25, 0.5, 0.0, 1.0]]
    r1 = [[0, "w", 0.5, 1.5, 1.0, 3.0], [1, "b", -0.25, 0.5, 0.0, 1.0]]   # w's grad differs
    (f,) = unsynced_gradients([[_rec(0, 1, r0)], [_rec(1, 1, r1)]])
    assert (f.check, f.severity, f.where.line) == ("unsynced_gradients", "error", 9)
    # (2.0 - 1.5) / 2.0 = 0.25: the norms' spread over the largest
    assert f.evidence == {"ranks": 2, "parameters": 1, "steps": [1],
                          "max_relative_grad_norm_difference": 0.25, "ddp": True}
    assert "1 trainable parameter (`w`)" in f.message


def test_drifted_weights_are_not_counted_again_and_no_ddp_is_a_warning():
    r0 = [[0, "w", 0.5, 2.0, 1.0, 3.0]]
    r1 = [[0, "w", 0.7, 2.2, 1.1, 3.1]]   # weights differ already: a later step of a drift
    assert unsynced_gradients([[_rec(0, 2, r0, ddp=False)], [_rec(1, 2, r1, ddp=False)]]) == []
    r1 = [[0, "w", 0.7, 2.2, 1.0, 3.0]]
    (f,) = unsynced_gradients([[_rec(0, 1, r0, ddp=False)], [_rec(1, 1, r1, ddp=False)]])
    assert f.severity == "warning"
    # no DDP module ran: no no_sync() to blame (before: "run the last micro-batch of each
    # step outside no_sync()", told to ring-attention-pytorch's LM on 2 ranks without DDP)
    assert "no_sync" not in f.message and "wrap the model in DDP" in f.message
    (f,) = unsynced_gradients([[_rec(0, 1, r0)], [_rec(1, 1, r1)]])
    assert "outside no_sync()" in f.message


def test_a_step_that_leaves_the_weights_equal_on_every_rank_is_not_counted():
    """Note [Replicas a step makes equal again]: fairscale's ShardedDataParallel scales each
    rank's gradient by 1 / N and sums it on its owner only, and OSS broadcasts the updated
    shards inside step(): different gradients, each changed by the reduction on some rank
    (the last column, the rank's own gradient, differs), equal weights after. Before, a
    warning on a correct loop."""
    # [index, name, grad sum, grad norm, weight sum, weight norm, own gradient sum]
    r0 = [[0, "w", 0.5, 2.0, 1.0, 3.0, 0.8], [1, "b", -0.25, 0.5, 0.0, 1.0, -0.3]]
    r1 = [[0, "w", 0.1, 1.5, 1.0, 3.0, 0.2], [1, "b", -0.25, 0.4, 0.0, 1.0, -0.5]]
    synced, a, b = [[0, 0.9, 2.9], [1, 0.1, 1.1]], _rec(0, 1, r0, False), _rec(1, 1, r1, False)
    assert unsynced_gradients([[{**a, "after": synced}], [{**b, "after": synced}]]) == []
    # one parameter leaves apart: each rank wrote its own update, the step is counted
    apart = [[0, 0.9, 2.9], [1, 0.2, 1.1]]
    (f,) = unsynced_gradients([[{**a, "after": synced}], [{**b, "after": apart}]])
    assert f.evidence["parameters"] == 2 and "drift apart" in f.message
    # a record without `after` (a step that never returned) is judged as before
    (f,) = unsynced_gradients([[a], [{**b, "after": synced}]])
    assert f.evidence["parameters"] == 2
    # equal after, but every gradient is its rank's own (OSS, nothing reduced): counted,
    # and said as it is
    own = [[[*row[:6], row[2]] for row in r] for r in (r0, r1)]
    (f,) = unsynced_gradients([[{**_rec(0, 1, own[0], False), "after": synced}],
                               [{**_rec(1, 1, own[1], False), "after": synced}]])
    assert f.evidence["parameters"] == 2
    assert "the step kept the weights equal" in f.message and "drift" not in f.message


def test_one_rank_or_a_rank_without_records_compares_nothing():
    rows = [[0, "w", 0.5, 2.0, 1.0, 3.0]]
    assert unsynced_gradients([[_rec(0, 1, rows)]]) == []
    assert unsynced_gradients([[_rec(0, 1, rows)], []]) == []


def test_reduced_gradients_that_are_the_ranks_sum_not_their_mean():
    from memledger.doctor.replicas import unaveraged_gradients

    # rank 0's own gradient sums 0.2, rank 1's 0.6: their mean 0.4, their sum 0.8
    def rows(local):
        return [[0, "w", 0.8, 2.0, 1.0, 3.0, local]]
    (f,) = unaveraged_gradients([[_rec(0, 1, rows(0.2))], [_rec(1, 1, rows(0.6))]])
    assert (f.check, f.evidence["ratio_to_mean"], f.evidence["steps"]) == \
        ("unaveraged_gradients", 2.0, [1])
    averaged = [[0, "w", 0.4, 2.0, 1.0, 3.0]]
    assert unaveraged_gradients([[_rec(0, 1, [averaged[0] + [0.2]])],
                                 [_rec(1, 1, [averaged[0] + [0.6]])]]) == []
    # unreduced (different on the ranks): unsynced_gradients' case, not this one
    assert unaveraged_gradients([[_rec(0, 1, [[0, "w", 0.2, 2.0, 1.0, 3.0, 0.2]])],
                                 [_rec(1, 1, [[0, "w", 0.6, 2.1, 1.0, 3.0, 0.6]])]]) == []
