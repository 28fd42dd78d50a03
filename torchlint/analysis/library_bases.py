"""Whether a class of the project derives from a library class of a family (a ``torch.distributions``
distribution that checks its arguments), through its bases in any file, from the project's
summaries (pure data, no libcst: settling runs on cached results). A check that sees a class of
another file built in a step names the family; the join settles it (``Report.subclass_of``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchlint.analysis.project import Project

# The distributions whose constructor checks its parameters' constraints (`validate_args`
# defaults to `__debug__`: on, unless Python runs with -O). Each check is a device op whose
# result the host reads (`if not valid.all(): raise`): one sync per parameter. (Not the wrapper
# `Independent`: it has no argument constraints and its `log_prob` checks nothing of its own;
# the distribution it wraps, built on its own, does the checking, and a finding there says it.
# `TransformedDistribution` has none either, but its `log_prob` checks the value's support.)
DISTRIBUTIONS = frozenset({
    "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet", "Exponential",
    "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal",
    "InverseGamma", "Kumaraswamy", "Laplace", "LKJCholesky", "LogNormal", "LogisticNormal", "LowRankMultivariateNormal",
    "MixtureSameFamily", "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical",
    "OneHotCategoricalStraightThrough", "Pareto", "Poisson", "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT",
    "TransformedDistribution", "Uniform", "VonMises", "Weibull", "Wishart",
})


def validating_distribution(qualified: str) -> bool:
    """``torch.distributions.Categorical`` (any module path under ``torch.distributions``)."""
    return qualified.startswith("torch.distributions.") and qualified.rsplit(".", 1)[-1] in DISTRIBUTIONS


FAMILIES: dict[str, Callable[[str], bool]] = {"distribution": validating_distribution}
# The keyword a subclass passes up as False to turn its family's cost off (`validate_args=False`: no checks).
TURNED_OFF_BY = {"distribution": "validate_args"}


def derives_from(project: Project, path: str, ref: tuple, family: str) -> bool:
    """Does ``ref`` (a class file ``path`` names) derive, through the project's classes, from a
    library class of ``family``?"""
    owner = project.class_of(ref, path, 0)
    if owner is None:
        return False  # not the project's (a library's class of the same name decides nothing here)
    wanted, off = FAMILIES[family], TURNED_OFF_BY.get(family)
    chain = [cls for _, cls in project.mro(*owner)]
    if off is not None and any(off in cls.passes_off for cls in chain):
        return False  # (drqv2's `TruncatedNormal(pyd.Normal)` builds its base with `validate_args=False`)
    return any(base[0] == "import" and wanted(str(base[-1])) for cls in chain for base in cls.bases)
