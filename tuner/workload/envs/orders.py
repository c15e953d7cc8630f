"""Orders with a returns policy: cancel, refund with a restocking fee, or deny by age."""

from __future__ import annotations

import random
from typing import Any

from tuner.workload.envs.base import Call, Environment, Scenario, lookup
from tuner.workload.envs.tools import ToolError, ToolSpec, format_money, parse_money, string_param

__all__ = ["Orders"]

NAMES = ("Dana Kim", "Omar Haddad", "Mia Schulz", "Raj Patel", "Sofia Lima", "Tom Berg")
PRODUCTS = (
    ("SKU-2041", "desk lamp", 3499), ("SKU-3310", "usb hub", 2450),
    ("SKU-4107", "monitor arm", 8900), ("SKU-5522", "keyboard", 6999),
    ("SKU-6034", "webcam", 5475), ("SKU-7718", "headset", 11250),
)  # fmt: skip
TODAY = 60


class Orders(Environment):
    """Customers with a tier, and orders with status, total, age in days and items."""

    name = "orders"
    pad_key = "events"
    tools = (
        ToolSpec.of(
            "get_customer",
            "Show a customer: name, tier (gold or standard) and order ids.",
            string_param("customer_id", "Customer id such as CUS-311."),
        ),
        ToolSpec.of(
            "get_order",
            "Show an order: customer and tier, status, total, days since placed, items.",
            string_param("order_id", "Order id such as ORD-10452."),
        ),
        ToolSpec.of(
            "cancel_order",
            "Cancel an order that is still processing; the full total is returned.",
            string_param("order_id", "Order id."),
            string_param("reason", "Why, in a few words."),
        ),
        ToolSpec.of(
            "refund_order",
            "Refund a shipped or delivered order.",
            string_param("order_id", "Order id."),
            string_param("amount", "Amount with two decimals, e.g. 62.99."),
            string_param("reason", "Why, in a few words."),
        ),
    )
    rules = (
        "Look up every order with get_order before acting on it.",
        "An order still processing is cancelled with cancel_order; its full total is returned.",
        "A shipped or delivered order cannot be cancelled: refund it with refund_order if it "
        "was placed at most 30 days ago, otherwise deny the request.",
        "Gold customers get the full order total back; standard customers get the total minus "
        "a 10% restocking fee, rounded down to the cent.",
        "Report the total amount returned to the customer and the ids of denied orders.",
    )

    def execute(self, state: dict[str, Any], tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run get_customer, get_order, cancel_order or refund_order."""
        if tool == "get_customer":
            cid = args["customer_id"]
            customer = lookup(state, "customers", cid, "no customer")
            order_ids = sorted(k for k, o in state["orders"].items() if o["customer"] == cid)
            return {"customer_id": cid, **customer, "orders": order_ids}
        order = lookup(state, "orders", args["order_id"], "no order")
        if tool == "get_order":
            return {
                "order_id": args["order_id"],
                "customer_id": order["customer"],
                "customer_tier": state["customers"][order["customer"]]["tier"],
                "status": order["status"],
                "total": format_money(order["total"]),
                "days_since_placed": TODAY - order["placed_day"],
                "items": [
                    {"sku": s, "name": n, "price": format_money(p)} for s, n, p in order["items"]
                ],
            }
        if tool == "cancel_order":
            if order["status"] != "processing":
                raise ToolError(f"order {args['order_id']} is {order['status']}; cannot cancel")
            order["status"] = "cancelled"
            state["returns"].append({"order": args["order_id"], "amount": order["total"]})
            return {"order_id": args["order_id"], "status": "cancelled",
                    "returned": format_money(order["total"])}  # fmt: skip
        # refund_order
        amount = parse_money(args["amount"])
        if order["status"] not in ("shipped", "delivered"):
            raise ToolError(f"order {args['order_id']} is {order['status']}; cannot refund")
        if not 0 < amount <= order["total"]:
            raise ToolError(f"refund must be between 0.01 and {format_money(order['total'])}")
        order["status"] = "refunded"
        state["returns"].append({"order": args["order_id"], "amount": amount})
        return {
            "order_id": args["order_id"],
            "status": "refunded",
            "returned": format_money(amount),
        }

    def filler(self, state: dict[str, Any], rng: random.Random, index: int) -> dict[str, Any]:
        """An order event (payment, packing, carrier scan) of one of the task's orders."""
        order_id = rng.choice(sorted(state["orders"]))
        order = state["orders"][order_id]
        return {
            "day": order["placed_day"] + index % 9,
            "order_id": order_id,
            "event": rng.choice(("payment captured", "packed", "carrier scan", "label printed")),
            "amount": format_money(order["total"]),
        }

    def canonical(self, state: dict[str, Any]) -> Any:
        """Order statuses and the multiset of (order, amount) returns."""
        statuses = {k: o["status"] for k, o in state["orders"].items()}
        returns = sorted((r["order"], r["amount"]) for r in state["returns"])
        return {"orders": statuses, "returns": returns}

    def generate(self, rng: random.Random, calls: int) -> Scenario:
        """A customer's cancellation requests, each cancelled, refunded or denied by policy."""
        cid = f"CUS-{rng.randint(100, 999)}"
        tier = rng.choice(("gold", "standard"))
        customers = {cid: {"name": rng.choice(NAMES), "tier": tier}}
        orders: dict[str, Any] = {}
        script: list[Call] = []
        requested: list[str] = []
        denied: list[str] = []
        notes: list[str] = []
        returned = 0
        left = calls
        numbers = iter(rng.sample(range(10000, 99999), 40))
        while left >= 2 or (left == 1 and rng.random() < 0.5):
            oid = f"ORD-{next(numbers)}"
            picked = rng.sample(PRODUCTS, rng.randint(1, 3))
            items = [list(p) for p in picked]
            total = sum(price for _, _, price in picked)
            kind = "deny" if left == 1 else rng.choice(("cancel", "refund", "refund", "deny"))
            if not requested and kind == "deny":
                kind = "refund"
            status = "processing" if kind == "cancel" else rng.choice(("shipped", "delivered"))
            age = rng.randint(31, 55) if kind == "deny" else rng.randint(1, 30)
            orders[oid] = {"customer": cid, "status": status, "total": total,
                           "placed_day": TODAY - age, "items": items}  # fmt: skip
            requested.append(oid)
            script.append(Call("get_order", {"order_id": oid}))
            left -= 1
            if kind == "deny":
                denied.append(oid)
                notes.append(f"deny {oid} (placed {age} days ago)")
                continue
            if kind == "cancel":
                script.append(Call("cancel_order", {"order_id": oid, "reason": "customer request"}))
                returned += total
                notes.append(f"cancel {oid} ({format_money(total)})")
            else:
                amount = total if tier == "gold" else total - (total + 9) // 10
                args = {"order_id": oid, "amount": format_money(amount),
                        "reason": "customer return"}  # fmt: skip
                script.append(Call("refund_order", args))
                returned += amount
                notes.append(f"refund {oid} {format_money(amount)} of {format_money(total)}")
            left -= 1
        for _ in range(left):  # a final look at the customer's orders
            script.append(Call("get_customer", {"customer_id": cid}))
        for _ in range(rng.randint(1, 2)):  # orders not in the request must stay untouched
            oid = f"ORD-{next(numbers)}"
            items = [list(rng.choice(PRODUCTS))]
            orders[oid] = {"customer": cid, "status": "delivered", "total": items[0][2],
                           "placed_day": TODAY - rng.randint(1, 20), "items": items}  # fmt: skip
        instruction = (
            f"Customer {cid} asks to cancel these orders: {', '.join(requested)}. Apply the "
            "returns policy, then report the total amount returned and the denied order ids."
        )
        answer = (
            f"Returned {format_money(returned)} to {cid} in total. "
            f"Denied: {', '.join(denied) or 'none'}."
        )
        state: dict[str, Any] = {"customers": customers, "orders": orders, "returns": []}
        facts = (format_money(returned), *denied)
        return Scenario(state, instruction, tuple(script), answer, facts, tuple(notes))
