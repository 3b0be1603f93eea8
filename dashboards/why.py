"""The "Why" panel: per GPU, the causes that hold now with their evidence, the likely one first.

It reads the cause rules (mirrorwatch.alerts.rules.causes), the same series the imbalance alert
names its lagging GPU's cause from, and shows each cause by its title from the cause table.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models import dashboard as models

from dashboards.layout import Row
from dashboards.panels import PanelSpec, instant_table, organize, table_panel
from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.rules import causes as rules
from mirrorwatch.alerts.rules.costs import COST_5M
from mirrorwatch.contract.causes import CAUSES, LIVE, cause
from mirrorwatch.contract.labels import TARGET_KEY

RANK, EVIDENCE = "Value #A", "Value #B"
COLUMNS = ["instance", "gpu", "run", "cause", "evidence", "value", "precedence"]


def run_causes(s: Select) -> tuple[str, str]:
    """Rank and evidence of each cause on the selected GPUs of the selected runs."""
    return f"sort({s(rules.RUN_GPU_CAUSE_RANK)})", s(rules.RUN_GPU_CAUSE)


def host_causes(s: Select) -> tuple[str, str]:
    """Rank and evidence of each cause on the selected GPUs: a GPU of an active run by the run's
    rules (they know its run peers and foreign processes), any other GPU by the host's."""
    key = f"{TARGET_KEY}, uuid"

    def either(run_level: str, host_level: str) -> str:
        return f"{s(run_level)} or ({s(host_level)} unless on ({key}) {s(run_level)})"

    return (
        f"sort({either(rules.RUN_GPU_CAUSE_RANK, rules.GPU_CAUSE_RANK)})",
        either(rules.RUN_GPU_CAUSE, rules.GPU_CAUSE),
    )


def _titles() -> list[models.ValueMapping]:
    """Each cause shown by its title, as the run report heads its finding."""
    return [
        models.ValueMap(
            options={
                c.kind: models.ValueMappingResult(text=c.title, index=i)
                for i, c in enumerate((*LIVE, *(c for c in CAUSES if c not in LIVE)))
            }
        )
    ]


def why_panel(queries: tuple[str, str], scope: str, *, width: int = 24) -> table.Panel:
    rank, evidence = queries
    precedence = ", ".join(c.title for c in LIVE)
    spec = PanelSpec(
        "Why",
        f"The known causes that hold now on each GPU of {scope}, most likely first, with the "
        "value that shows each (its evidence says what it is and in which unit). The order "
        f"is the run report's: {precedence}. {cause('imbalance').title} means none of the "
        "others holds while the GPU lags the busiest by more than the imbalance threshold; the "
        "GpuUtilizationImbalance alert names the first cause of its lagging GPU.",
        "none",
        [instant_table(rank), instant_table(evidence)],
        width=width,
        height=6,
        decimals=2,
        mappings=_titles(),
        transformations=[
            models.DataTransformerConfig(id_val="merge", options={}),
            organize(
                exclude=["Time", "__name__", "job", "uuid", "cluster", "host"],
                rename={RANK: "precedence", EVIDENCE: "value"},
                order=COLUMNS,
            ),
        ],
    )
    return table_panel(spec).sort_by(
        [common_builders.TableSortByFieldState().display_name("precedence")]
    )


def cost_panel(s: Select, *, width: int = 8) -> table.Panel:
    """What each GPU of the selected runs costs its run now, by cause: the live 5-minute costs
    TrainingHeldBack and the run report read (alerts/rules/costs.py)."""
    spec = PanelSpec(
        "Cost now",
        "The share of its run's throughput each GPU cost over the last 5 minutes, by cause "
        "(the run report's methods, recorded live): TrainingHeldBack fires at "
        "5 % held 5 minutes, whether or not utilisation is balanced. A straggler (its peers "
        "wait for it in the all-reduce at near-idle power) shows here though every GPU reads "
        "busy.",
        "percentunit",
        [instant_table(f"sort_desc({s(COST_5M)})")],
        width=width,
        height=6,
        decimals=1,
        mappings=_titles(),
        transformations=[
            organize(
                exclude=["Time", "__name__", "job", "uuid", "cluster", "host", "instance"],
                rename={"Value": "cost"},
                order=["run", "gpu", "cause", "cost"],
            ),
        ],
    )
    return table_panel(spec)


def why_row(queries: tuple[str, str], scope: str, cost: Select | None = None) -> Row:
    if cost is None:
        return Row("Causes now", [why_panel(queries, scope)])
    return Row("Causes now", [why_panel(queries, scope, width=16), cost_panel(cost)])
