"""One reading of a query string for every place that rewrites one (cassette credentials, policy rules)."""

from __future__ import annotations

from relay_runtime import redaction
from relay_runtime.cassettes import secrets
from relay_runtime.urls import edit_query


def test_edit_query_gives_decoded_names_and_keeps_the_rest_byte_for_byte() -> None:
    seen: list[tuple[str, str, str]] = []

    def upper_b(name: str, raw_name: str, raw_value: str) -> str | None:
        seen.append((name, raw_name, raw_value))
        return f"{raw_name}=B" if name == "b c" else None

    path = "/v1/x?a=1&flag&b+c=2&d=%41&a=3"
    assert edit_query(path, upper_b) == "/v1/x?a=1&flag&b+c=B&d=%41&a=3"
    assert seen == [("a", "a", "1"), ("b c", "b+c", "2"), ("d", "d", "%41"), ("a", "a", "3")]
    assert edit_query("/v1/x", upper_b) == "/v1/x"


def test_cassette_query_credentials_are_blanked_by_the_one_query_rule() -> None:
    path, found = secrets.redact_query("/m?key=AIzaSecretValue1&alt=sse&API_KEY=abc&sig=short%2Bvalue1&empty=")
    assert path == f"/m?key={redaction.REDACTED}&alt=sse&API_KEY={redaction.REDACTED}&sig={redaction.REDACTED}&empty="
    assert found == {"AIzaSecretValue1", "short%2Bvalue1", "short+value1"}  # "abc" is too short to cut elsewhere
    for name in ("key", "Subscription-Key", "api_key", "x_auth_token", "password"):
        assert redaction.is_query_credential(name), name
    for name in ("alt", "keyword", "idempotency_key", "author"):
        assert not redaction.is_query_credential(name), name


def test_a_presigned_urls_signer_token_and_signature_are_blanked_and_its_terms_kept() -> None:
    from relay_runtime.urls import recorded_url

    url = (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE0%2F20261205"
        "&X-Amz-Expires=900&X-Amz-Security-Token=IQoJtoken0123&X-Amz-Signature=0a1b2c3d&X-Goog-Credential=a%40b.iam"
    )
    taken: list[str] = []
    assert recorded_url(url, taken) == (
        f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={redaction.REDACTED}"
        f"&X-Amz-Expires=900&X-Amz-Security-Token={redaction.REDACTED}&X-Amz-Signature={redaction.REDACTED}"
        f"&X-Goog-Credential={redaction.REDACTED}"
    )
    assert "AKIAEXAMPLE0/20261205" in taken


def test_a_presigned_urls_signing_scope_is_blanked_in_place_but_not_remembered_as_a_secret() -> None:
    """Its runs of 8 are dates and regions: remembered, every later record would lose them."""
    from relay_runtime.urls import recorded_url

    scope = "AKIAEXAMPLE0%2F20261205%2Feu-west-1%2Fs3%2Faws4_request"
    url = f"https://b.s3.eu-west-1.amazonaws.com/k?X-Amz-Credential={scope}&X-Amz-Signature=0a1b2c3d4e5f6789"
    try:
        assert "X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]" in recorded_url(url)
        said = "eu-west-1 on 20261205, signed 0a1b2c3d4e5f6789"
        assert redaction.scrub_text(said) == "eu-west-1 on 20261205, signed [redacted]"
        path, found = secrets.redact_query(url.partition(".com")[2])
        assert found == {"0a1b2c3d4e5f6789"} and "X-Amz-Credential=[redacted]" in path
    finally:
        redaction.forget_secrets()
