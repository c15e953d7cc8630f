"""The ledger: accounts and transfers, with the overdraft and frozen-account rules."""

from __future__ import annotations

import random
from typing import Any

from tuner.workload.envs.base import Call, Environment, Scenario, lookup
from tuner.workload.envs.tools import ToolError, ToolSpec, format_money, parse_money, string_param

__all__ = ["Ledger"]

OWNERS = (
    "Ana Ortiz", "Ben Okafor", "Chen Wei", "Dana Kim", "Eli Novak", "Fatima Rahman",
    "Gus Lindqvist", "Hana Sato", "Ivan Petrov", "Jo Mensah", "Kai Huber", "Lena Rossi",
)  # fmt: skip
MEMOS = (
    "invoice 7781", "rent March", "supplier deposit", "payroll top-up", "refund batch",
    "equipment lease", "tax reserve", "travel advance", "consulting fee", "insurance premium",
)  # fmt: skip


class Ledger(Environment):
    """Accounts with balances (in cents) and a list of posted transfers."""

    name = "ledger"
    pad_key = "recent_transactions"
    tools = (
        ToolSpec.of(
            "get_account",
            "Show an account: owner, balance, status (open or frozen) and recent transactions.",
            string_param("account_id", "Account id such as ACC-1042."),
        ),
        ToolSpec.of(
            "list_transactions",
            "List the transfers posted to or from an account, newest last.",
            string_param("account_id", "Account id such as ACC-1042."),
        ),
        ToolSpec.of(
            "post_transfer",
            "Move money between two accounts and return both new balances.",
            string_param("from_account", "Source account id."),
            string_param("to_account", "Destination account id."),
            string_param("amount", "Amount with two decimals, e.g. 1,250.40."),
            string_param("memo", "Memo copied from the request."),
        ),
    )
    rules = (
        "Look up the source account with get_account before every transfer.",
        "Never post a transfer from a frozen account: skip the request and report its id.",
        "Never post a transfer that would take the source balance below zero: skip the "
        "request and report its id.",
        "Process transfer requests in the order given; later requests see earlier balances.",
        "Write amounts with two decimals and thousands separators, e.g. 1,250.40.",
    )

    def execute(self, state: dict[str, Any], tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run get_account, list_transactions or post_transfer."""
        if tool == "get_account":
            acc = lookup(state, "accounts", args["account_id"], "no account")
            return {
                "account_id": args["account_id"],
                "owner": acc["owner"],
                "balance": format_money(acc["balance"]),
                "status": acc["status"],
            }
        if tool == "list_transactions":
            account_id = args["account_id"]
            lookup(state, "accounts", account_id, "no account")
            posted = [
                {**t, "amount": format_money(t["amount"])}
                for t in state["transfers"]
                if account_id in (t["from"], t["to"])
            ]
            return {"account_id": account_id, "transfers": posted}
        # post_transfer
        src = lookup(state, "accounts", args["from_account"], "no account")
        dst = lookup(state, "accounts", args["to_account"], "no account")
        amount = parse_money(args["amount"])
        if args["from_account"] == args["to_account"]:
            raise ToolError("source and destination are the same account")
        if amount <= 0:
            raise ToolError("amount must be positive")
        if src["status"] == "frozen":
            raise ToolError(f"account {args['from_account']} is frozen")
        if src["balance"] < amount:
            raise ToolError(f"insufficient funds in {args['from_account']}")
        src["balance"] -= amount
        dst["balance"] += amount
        transfer_id = f"TR-{state['next_transfer']}"
        state["next_transfer"] += 1
        state["transfers"].append(
            {
                "id": transfer_id,
                "from": args["from_account"],
                "to": args["to_account"],
                "amount": amount,
                "memo": args["memo"],
            }
        )
        return {
            "transfer_id": transfer_id,
            "from_account": args["from_account"],
            "from_balance": format_money(src["balance"]),
            "to_account": args["to_account"],
            "to_balance": format_money(dst["balance"]),
            "amount": format_money(amount),
        }

    def filler(self, state: dict[str, Any], rng: random.Random, index: int) -> dict[str, Any]:
        """A past transaction between two of the task's accounts."""
        ids = sorted(state["accounts"])
        return {
            "tx": f"TX-{rng.randint(100000, 999999)}",
            "date": f"2024-02-{1 + index % 28:02d}",
            "account": rng.choice(ids),
            "counterparty": rng.choice(ids),
            "amount": format_money(rng.randint(500, 300000)),
            "memo": rng.choice(MEMOS),
        }

    def canonical(self, state: dict[str, Any]) -> Any:
        """Balances, statuses and the multiset of (from, to, amount) transfers."""
        accounts = {k: (v["balance"], v["status"]) for k, v in state["accounts"].items()}
        transfers = sorted((t["from"], t["to"], t["amount"]) for t in state["transfers"])
        return {"accounts": accounts, "transfers": transfers}

    def generate(self, rng: random.Random, calls: int) -> Scenario:
        """Transfer requests, some forbidden by the policy, then the report account's balance."""
        ids = [f"ACC-{n}" for n in rng.sample(range(1000, 10000), rng.randint(4, 6))]
        owners = rng.sample(OWNERS, len(ids))
        accounts: dict[str, dict[str, Any]] = {
            i: {"owner": o, "balance": rng.randint(200_00, 5000_00), "status": "open"}
            for i, o in zip(ids, owners, strict=True)
        }
        frozen = ids[-1]
        accounts[frozen]["status"] = "frozen"
        state: dict[str, Any] = {"accounts": accounts, "transfers": [], "next_transfer": 5001}
        sim: dict[str, int] = {i: int(a["balance"]) for i, a in accounts.items()}
        open_ids = ids[:-1]

        lines: list[str] = []
        script: list[Call] = []
        skipped: list[str] = []
        notes: list[str] = []
        left = calls
        while left >= 1:
            req = f"REQ-{len(lines) + 1}"
            allowed = left >= 2 and (not script or rng.random() < 0.75)
            if not allowed and left == 1 and script and rng.random() < 0.5:
                break  # pad the last call with a read instead
            src = rng.choice(open_ids) if allowed else rng.choice(ids)
            dst = rng.choice([i for i in ids if i != src])
            amount = min(sim[src], rng.randint(5_00, max(5_00, sim[src] // 3)))
            if amount <= 0:
                allowed = False
            if not allowed:
                # Forbidden either way: a frozen source, or more than the source holds.
                amount = sim[src] + rng.randint(1_00, 900_00)
            memo = rng.choice(MEMOS)
            lines.append(f"{req}: {format_money(amount)} from {src} to {dst}, memo '{memo}'")
            script.append(Call("get_account", {"account_id": src}))
            left -= 1
            if allowed:
                args = {
                    "from_account": src,
                    "to_account": dst,
                    "amount": format_money(amount),
                    "memo": memo,
                }
                script.append(Call("post_transfer", args))
                sim[src] -= amount
                sim[dst] += amount
                left -= 1
                notes.append(f"post {req} ({format_money(amount)} {src} -> {dst})")
            else:
                skipped.append(req)
                notes.append(f"skip {req} ({'frozen' if src == frozen else 'overdraft'})")
        report = script[0].arguments["account_id"]
        while left > 0:
            script.append(Call("list_transactions", {"account_id": report}))
            left -= 1
        balance = format_money(sim[report])
        skipped_text = ", ".join(skipped) if skipped else "none"
        instruction = (
            "Process these transfer requests in order, following the ledger policy:\n"
            + "\n".join(lines)
            + f"\nThen report the final balance of {report} and the ids of skipped requests."
        )
        answer = f"Final balance of {report}: {balance}. Skipped requests: {skipped_text}."
        facts = (balance, *skipped)
        return Scenario(state, instruction, tuple(script), answer, facts, tuple(notes))
