from agent.ledger import arbiter
from agent.ledger.arrivals import Arrival
from agent.core.intake import parse_delivery

async def test_x(ledger_conn):
    items = [parse_delivery(l, arrival_at="2026-01-01T00:00:00.000Z", receiver="t", line=n) for n, l in enumerate([
        '{"source":"A/T","transitionId":1,"bootId":"B1","payload":{"x":1}}',
        '{"source":"A/T","transitionId":1,"bootId":"B1","payload":{"x":1}}',
        '{"source":"A/T","transitionId":1,"bootId":"B1","payload":{"x":2}}',
        '{"source":"A/T","transitionId":1}',
        'nope',
    ],1)]
    out = await arbiter.record(ledger_conn, [Arrival(i, "gw", "import") for i in items])
    print(out)
    assert [o.decision.value for o in out] == ["inserted","duplicate","conflict","identity_incomplete","rejected"]
