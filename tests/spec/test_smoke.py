from tests.launcher import Node


def test_put_then_get_returns_the_value(node: Node) -> None:
    assert node.put("k", b"v").status == 201
    response = node.get("k")
    assert (response.status, response.body) == (200, b"v")
