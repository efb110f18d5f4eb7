"""The linear probe: multinomial logistic regression on a frozen model's sentence embeddings.

It measures how much of a task the base model already solves (the fine-tuning has to beat it
well for the task to be worth a delta), and its weights are where the fine-tuning's head
starts (linear probing then fine-tuning, Kumar et al. 2022: the encoder then moves less, which
also makes its delta smaller). The L2 penalty is chosen on dev from :data:`PENALTIES`.
"""

from dataclasses import dataclass

import torch

__all__ = ["PENALTIES", "Probe", "fit_probe", "train_probe"]

#: The L2 penalties tried (on the mean of the squared weights, per example).
PENALTIES = (1e-4, 1e-3, 1e-2)


@dataclass(frozen=True)
class Probe:
    """A fitted probe.

    Members
    -------
    weight : torch.Tensor
        ``(labels, hidden)`` float32.
    bias : torch.Tensor
        ``(labels,)`` float32.
    penalty : float
        The L2 penalty it was fitted with.
    dev_accuracy : float
    """

    weight: torch.Tensor
    bias: torch.Tensor
    penalty: float
    dev_accuracy: float


def fit_probe(x, y, num_labels, penalty, *, steps=200):
    """``(weight, bias)`` of the L2-penalised logistic regression of ``y`` on ``x``
    (full-batch L-BFGS in float64, from zero: deterministic)."""
    x, y = x.double(), torch.as_tensor(y)
    weight = torch.zeros((num_labels, x.shape[1]), dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(num_labels, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], max_iter=steps, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def loss():
        opt.zero_grad()
        value = torch.nn.functional.cross_entropy(x @ weight.t() + bias, y) \
            + penalty * weight.square().sum()
        value.backward()
        return value

    opt.step(loss)
    return weight.detach().float(), bias.detach().float()


def train_probe(train_x, train_y, dev_x, dev_y, num_labels):
    """The :class:`Probe` with the best dev accuracy over :data:`PENALTIES` (the smaller
    penalty on a tie)."""
    best = None
    for penalty in PENALTIES:
        weight, bias = fit_probe(train_x, train_y, num_labels, penalty)
        predicted = (dev_x.float() @ weight.t() + bias).argmax(dim=1)
        acc = float((predicted == torch.as_tensor(dev_y)).double().mean())
        if best is None or acc > best.dev_accuracy:
            best = Probe(weight=weight, bias=bias, penalty=penalty, dev_accuracy=acc)
    return best
