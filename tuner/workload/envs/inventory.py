"""The inventory: stock on hand per SKU, picks, receipts and bin moves, with backorders."""

from __future__ import annotations

import random
from typing import Any

from tuner.workload.envs.base import Call, Environment, Scenario, lookup
from tuner.workload.envs.tools import ToolError, ToolSpec, integer_param, string_param

__all__ = ["Inventory"]

PARTS = (
    "hex bolt M6", "washer 8mm", "hinge steel", "cable tie 200", "fuse 5A", "relay 12V",
    "bearing 608", "gasket 40mm", "spring 12mm", "bracket L", "rivet 4mm", "o-ring 22mm",
)  # fmt: skip
BINS = ("A-12", "A-14", "B-03", "B-07", "C-04", "C-11", "D-01", "D-09")


class Inventory(Environment):
    """Items by SKU with quantity on hand, bin and reorder point."""

    name = "inventory"
    pad_key = "movements"
    tools = (
        ToolSpec.of(
            "get_item",
            "Show an item: name, quantity on hand, bin, reorder point and recent movements.",
            string_param("sku", "Item SKU such as SKU-4821."),
        ),
        ToolSpec.of(
            "adjust_stock",
            "Add (receipt, positive) or remove (pick, negative) stock for an item.",
            string_param("sku", "Item SKU."),
            integer_param("delta", "Quantity change: positive adds, negative removes."),
            string_param("reference", "Order (SO-...) or receipt (RC-...) reference."),
        ),
        ToolSpec.of(
            "move_item",
            "Move an item to another bin.",
            string_param("sku", "Item SKU."),
            string_param("bin", "Bin such as C-04."),
        ),
    )
    rules = (
        "Look up an item with get_item before changing it.",
        "Receipts add stock (positive delta); picks remove it (negative delta); always pass "
        "the order or receipt reference.",
        "A pick larger than the quantity on hand is not recorded: report its order reference "
        "as a backorder.",
        "After the work, list every SKU of the request whose quantity on hand is at or below "
        "its reorder point.",
    )

    def execute(self, state: dict[str, Any], tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run get_item, adjust_stock or move_item."""
        sku = args["sku"]
        item = lookup(state, "items", sku, "no item")
        if tool == "get_item":
            return {"sku": sku, **item}
        if tool == "adjust_stock":
            delta = args["delta"]
            if delta == 0:
                raise ToolError("delta must not be zero")
            if item["on_hand"] + delta < 0:
                raise ToolError(f"{sku} has only {item['on_hand']} on hand")
            item["on_hand"] += delta
            state["adjustments"].append({"sku": sku, "delta": delta, "ref": args["reference"]})
            return {"sku": sku, "on_hand": item["on_hand"], "adjustment": len(state["adjustments"])}
        # move_item
        if args["bin"] not in BINS:
            raise ToolError(f"no bin {args['bin']}; bins are {', '.join(BINS)}")
        item["bin"] = args["bin"]
        return {"sku": sku, "bin": item["bin"]}

    def filler(self, state: dict[str, Any], rng: random.Random, index: int) -> dict[str, Any]:
        """A past stock movement of one of the task's items."""
        sku = rng.choice(sorted(state["items"]))
        return {
            "date": f"2024-02-{1 + index % 28:02d}",
            "sku": sku,
            "delta": rng.choice((-1, 1)) * rng.randint(1, 40),
            "reference": f"{rng.choice(('SO', 'RC'))}-{rng.randint(1000, 9999)}",
            "bin": state["items"][sku]["bin"],
        }

    def canonical(self, state: dict[str, Any]) -> Any:
        """Quantity and bin per SKU, and the multiset of (sku, delta) adjustments."""
        items = {k: (v["on_hand"], v["bin"]) for k, v in state["items"].items()}
        adjustments = sorted((a["sku"], a["delta"]) for a in state["adjustments"])
        return {"items": items, "adjustments": adjustments}

    def generate(self, rng: random.Random, calls: int) -> Scenario:
        """Picks, receipts and moves, some picks backordered; then the low-stock SKUs."""
        skus = [f"SKU-{n}" for n in rng.sample(range(1000, 10000), rng.randint(4, 7))]
        items: dict[str, dict[str, Any]] = {
            s: {
                "name": rng.choice(PARTS),
                "on_hand": rng.randint(5, 80),
                "bin": rng.choice(BINS),
                "reorder_at": rng.randint(10, 30),
            }
            for s in skus
        }
        state: dict[str, Any] = {"items": items, "adjustments": []}
        sim: dict[str, int] = {s: int(i["on_hand"]) for s, i in items.items()}
        lines: list[str] = []
        script: list[Call] = []
        backorders: list[str] = []
        touched: list[str] = []
        notes: list[str] = []
        left = calls
        while left >= 2 or (left == 1 and script and rng.random() < 0.5):
            sku = rng.choice(skus)
            kind = rng.choice(("pick", "pick", "receive", "move")) if script else "pick"
            script.append(Call("get_item", {"sku": sku}))
            left -= 1
            if sku not in touched:
                touched.append(sku)
            backorder = kind == "pick" and (sim[sku] == 0 or (script[1:] and rng.random() < 0.3))
            if left == 0 or backorder:
                ref = f"SO-{rng.randint(1000, 9999)}"
                qty = sim[sku] + rng.randint(1, 30)
                lines.append(f"pick {qty} x {sku} for order {ref}")
                backorders.append(ref)
                notes.append(f"backorder {ref} ({qty} > {sim[sku]} on hand)")
                continue
            if kind == "pick":
                ref = f"SO-{rng.randint(1000, 9999)}"
                qty = rng.randint(1, max(1, sim[sku]))
                lines.append(f"pick {qty} x {sku} for order {ref}")
                script.append(Call("adjust_stock", {"sku": sku, "delta": -qty, "reference": ref}))
                sim[sku] -= qty
            elif kind == "receive":
                ref = f"RC-{rng.randint(100, 999)}"
                qty = rng.randint(5, 60)
                lines.append(f"receive {qty} x {sku} on receipt {ref}")
                script.append(Call("adjust_stock", {"sku": sku, "delta": qty, "reference": ref}))
                sim[sku] += qty
            else:
                target = rng.choice([b for b in BINS if b != items[sku]["bin"]])
                lines.append(f"move {sku} to bin {target}")
                script.append(Call("move_item", {"sku": sku, "bin": target}))
            notes.append(lines[-1])
            left -= 1
        while left > 0:
            script.append(Call("get_item", {"sku": touched[0]}))
            left -= 1
        low = [s for s in touched if sim[s] <= items[s]["reorder_at"]]
        first = touched[0]
        instruction = (
            "Record this warehouse work in order, following the inventory policy:\n"
            + "\n".join(f"{n + 1}. {line}" for n, line in enumerate(lines))
            + f"\nThen report the quantity now on hand of {first}, the backordered order "
            "references, and every SKU above whose quantity on hand is at or below its "
            "reorder point."
        )
        answer = (
            f"{first} has {sim[first]} on hand. "
            f"Backordered: {', '.join(backorders) or 'none'}. "
            f"At or below reorder point: {', '.join(low) or 'none'}."
        )
        facts = (str(sim[first]), *backorders, *low)
        return Scenario(state, instruction, tuple(script), answer, facts, tuple(notes))
