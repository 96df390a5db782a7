"""The built-in detectors on true and false positives: each case is a value inside a sentence."""

from __future__ import annotations

import pytest

from relay_runtime import detectors
from relay_runtime.redaction import RedactionPolicy, Rule

CARD_CASES = [
    # (text, found)
    ("4111 1111 1111 1111", True),  # Visa test number, spaced
    ("4111-1111-1111-1111", True),  # dashed
    ("4111111111111111", True),  # bare
    ("4012888888881881", True),  # Visa
    ("5500005555555559", True),  # Mastercard
    ("5105105105105100", True),  # Mastercard
    ("2223003122003222", True),  # Mastercard 2-series
    ("378282246310005", True),  # American Express (15 digits)
    ("3714 496353 98431", True),  # Amex, its own grouping
    ("6011111111111117", True),  # Discover
    ("3530111333300000", True),  # JCB
    ("30569309025904", True),  # Diners Club (14 digits)
    ("6200000000000005", True),  # UnionPay
    ("5018 0000 0000 0041", True),  # Maestro, Europe's debit card
    ("675900000000000042", True),  # Maestro (UK), 18 digits
    ("6304000000000042", True),  # Maestro (Laser)
    ("5893000000000000045", True),  # Maestro, 19 digits
    ("2201 0000 0000 0045", True),  # Mir
    ("6080 0000 0000 0042", True),  # RuPay
    ("5080000000000044", True),  # RuPay
    ("7000000000000047", False),  # Luhn passes, no issuer starts with 7
    ("5000000000000041", False),  # nor with 5000
    ("4111 1111 1111 1112", False),  # Luhn fails
    ("1234567812345678", False),  # Luhn passes, no issuer starts with 1
    ("order 9876543210123", False),  # an order number
    ("0000000000000000", False),  # one digit repeated
    ("4111 1111-1111 1111", False),  # mixed separators: not how a card is written
    ("411111111111", False),  # 12 digits: too short
    ("41111111111111111111", False),  # 20 digits: too long
    ("2024-01-15", False),  # a date
    ("+44 20 7946 0958", False),  # a phone number
    ("tracking 1Z999AA10123456784", False),  # a parcel id
    ("4111111111111111x", False),  # glued to a word
]

PHONE_CASES = [
    ("+1 415 555 2671", True),
    ("+14155552671", True),  # E.164 without spaces
    ("+44 20 7946 0958", True),
    ("+49 (0)30 123456", True),
    ("+33 1 23 45 67 89", True),
    ("+81-3-1234-5678", True),
    ("+91 98765 43210", True),
    ("+61 2 9876 5432", True),
    ("0044 20 7946 0958", True),  # the 00 international prefix
    ("(415) 555-2671", True),
    ("415-555-2671", True),
    ("415.555.2671", True),
    ("+1 (415) 555-2671", True),
    ("2024-01-15", False),  # a date
    ("192.168.1.1", False),  # an address
    ("Order #123456789", False),  # an order number
    ("4111 1111 1111 1111", False),  # a card number
    ("version 1.2.3", False),
    ("12:30:45", False),  # a time
    ("$1,234,567.89", False),  # an amount
    ("ISBN 978-3-16-148410-0", False),
    ("415-555.2671", False),  # mixed separators
    ("call 911", False),
    ("+1 2", False),  # too few digits
    ("123-45-6789", False),  # a US SSN shape
    ("10.0.0.1", False),
]

KEY_CASES = [
    ("sk-proj-abcdefghijklmnopqrstuvwxyz012345", True),  # OpenAI project key
    ("sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD", True),  # OpenAI legacy key
    ("sk-svcacct-AbCdEfGhIjKlMnOpQrStUvWx", True),  # OpenAI service account
    ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", True),  # Anthropic
    ("sk-ant-admin01-abcdefghijklmnopqrstuvwx", True),  # Anthropic admin
    ("AKIAIOSFODNN7EXAMPLE", True),  # AWS access key id
    ("ASIAY34FZKBOKMUTVV7A", True),  # AWS temporary key id
    ("AIzaSyA1234567890abcdefghijklmnopqrstuv", True),  # Google API key
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", True),  # GitHub classic token
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", True),  # GitHub fine-grained
    ("xoxb-123456789012-abcdefghij", True),  # Slack bot token
    ("xoxp-1234-5678-abcdefghijkl", True),  # Slack user token
    ("sk_live_abcdefghijklmnop1234", True),  # Stripe secret key
    ("rk_test_abcdefghijklmnop1234", True),  # Stripe restricted key
    # The keys of the other providers the adapters name (issue 28's endpoints), pasted into a chat as often.
    ("gsk_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5kL7nP9rS1tV3xZ5", True),  # Groq
    ("xai-" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5kL7nP9rS1tV3xZ5aB3dE5gH7jK9mN1pQ3sT5vW7yZ9b", True),  # xAI
    ("pplx-" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5kL7nP9rS1t", True),  # Perplexity
    ("hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH", True),  # Hugging Face
    ("https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", True),  # Slack webhook
    ("sk-short", False),  # too short to be a key
    ("gsk_short", False),
    ("the xai-grok model family", False),
    ("pplx-api docs", False),
    ("hf_hub_download", False),
    ("https://hooks.slack.com/", False),
    ("task-management", False),
    ("skeleton-key-for-everything-here", False),  # words, not a key
    ("AKIA-is-a-prefix", False),
    ("ghp_short", False),
    ("pk_live_abcdefghijklmnop1234", False),  # Stripe publishable keys are public
    ("github.com/openai/openai-python", False),
    ("the max_tokens parameter", False),
    ("AIza", False),
    ("xox-nope", False),
    ("mask-proj-abcdefghijklmnopqrstuvwxyz012345", False),  # sk- inside a longer word
]

OTHER_CASES = [
    ("email", "jane.doe+tag@example.co.uk", True),
    ("email", "a@b", False),
    ("email", "not an email @ here", False),
    ("email", "@handle", False),
    # Addresses in other scripts are addresses.
    ("email", "josé@bücher.de", True),
    ("email", "jane@xn--bcher-kva.xn--p1ai", True),
    ("email", "@app.route", False),
    ("email", "pip install pkg@1.2.3", False),
    ("iban", "GB82 WEST 1234 5698 7654 32", True),
    ("iban", "DE89370400440532013000", True),
    ("iban", "FR14 2004 1010 0505 0001 3M02 606", True),
    ("iban", "GB82 WEST 1234 5698 7654 33", False),  # checksum fails
    ("iban", "AB12 CDEF GHIJ KLMN", False),
    ("ip_address", "10.0.0.1", True),
    ("ip_address", "2001:db8::1", True),
    ("ip_address", "fe80::1ff:fe23:4567:890a", True),
    ("ip_address", "::ffff:192.0.2.1", True),
    ("ip_address", "999.1.1.1", False),
    ("ip_address", "12:30:45", False),
    ("ip_address", "1.2.3", False),
    ("us_ssn", "123-45-6789", True),
    ("us_ssn", "000-12-3456", False),
    ("us_ssn", "666-12-3456", False),
    ("us_ssn", "123-00-6789", False),
    ("us_ssn", "123-45-67890", False),
    # Grouped by spaces, as speech-to-text writes a number read aloud (a voice session's transcript).
    ("us_ssn", "123 45 6789", True),
    ("us_ssn", "123 00 6789", False),
    ("us_ssn", "1 123 45 6789", False),  # a longer spaced number
    ("us_ssn", "123 45 6789 0", False),
    ("us_ssn", "+1 415 55 2671", False),
    ("us_ssn", "123 45-6789", False),  # separators that differ
    ("us_ssn", "123456789", False),  # bare digit runs are ids as often
    ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9", True),
    ("jwt", "eyJub3QiOiJhIGp3dCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc", False),  # header without "alg"
    ("high_entropy", "Zx8Kq2LmN4pR7sT1vW3yB5cD9fG", True),
    ("high_entropy", "thisisaverylongwordwithoutanything", False),
    ("high_entropy", "0123456789abcdef0123456789abcdef", False),  # hex: at most 4 bits a character
    ("high_entropy", "CamelCaseIdentifierNameForThings1", False),
]


def _found(name: str, value: str) -> list[str]:
    text = f"see {value}, thanks"
    return [text[s:e] for s, e in detectors.detector(name).find(text)]


@pytest.mark.parametrize(("value", "expected"), CARD_CASES)
def test_credit_card(value: str, expected: bool) -> None:
    assert _found("credit_card", value) == ([value] if expected else [])


@pytest.mark.parametrize(("value", "expected"), PHONE_CASES)
def test_phone(value: str, expected: bool) -> None:
    assert _found("phone", value) == ([value] if expected else [])


@pytest.mark.parametrize(("value", "expected"), KEY_CASES)
def test_api_key(value: str, expected: bool) -> None:
    assert _found("api_key", value) == ([value] if expected else [])


PEM_KEY = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f"here is the key:\n{PEM_KEY}\nthanks", PEM_KEY),
        # As a service account's JSON holds it, read as text: its newlines escaped.
        ('{"private_key": "' + PEM_KEY.replace("\n", "\\n") + '\\n", "x": 1}', PEM_KEY.replace("\n", "\\n")),
        (PEM_KEY.replace("PRIVATE", "RSA PRIVATE"), PEM_KEY.replace("PRIVATE", "RSA PRIVATE")),
        # Cut short (a truncated message): the key is redacted as far as it goes, the words after it kept.
        ("key " + PEM_KEY[:120] + " is it right?", PEM_KEY[:120]),
    ],
)
def test_a_private_key_block_is_found_whole(text: str, value: str) -> None:
    assert [text[s:e] for s, e in detectors.detector("api_key").find(text)] == [value]


def test_a_public_key_or_certificate_is_no_secret() -> None:
    text = PEM_KEY.replace("PRIVATE KEY", "CERTIFICATE") + "\n" + PEM_KEY.replace("PRIVATE", "PUBLIC")
    assert detectors.detector("api_key").find(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        '{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}',
        '"{\\"aws_secret_access_key\\": \\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\\"}"',  # JSON in JSON
    ],
)
def test_an_aws_secret_access_key_is_found_by_its_name_and_only_the_value_replaced(text: str) -> None:
    """The secret half of an AWS key pair has no prefix of its own: the name it is written under says what it is."""
    assert [text[s:e] for s, e in detectors.detector("api_key").find(text)] == [
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    ]


SIGNATURE = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        # A presigned S3 URL pasted into a message: whoever holds it reads the file until it expires.
        (
            "download https://b.s3.amazonaws.com/f.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
            "AKIAIOSFODNN7EXAMPLE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z"
            f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={SIGNATURE} now",
            ["AKIAIOSFODNN7EXAMPLE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request", SIGNATURE],
        ),
        (
            f"gs https://storage.googleapis.com/b/o?X-Goog-Date=20260101T000000Z&X-Goog-Signature={SIGNATURE}",
            [SIGNATURE],
        ),
        (  # an Azure SAS
            "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&se=2026-01-01&sr=b&sp=r&sig=AbCdEfGh%2BIjKl%3D ok",
            ["AbCdEfGh%2BIjKl%3D"],
        ),
        ("https://api.example.com/v1/me?access_token=a1B2c3D4e5F6g7H8&page=2", ["a1B2c3D4e5F6g7H8"]),
        (  # CloudFront's signatures hold "~"
            "https://d1.cloudfront.net/i.jpg?Expires=1767225600&Signature=Nql641NHEUk~SYeUSoBJ-Afh9~lOCM_&Key-Pair-Id=K2",
            ["Nql641NHEUk~SYeUSoBJ-Afh9~lOCM_"],
        ),
        # Read in JSON text too, after an escape that glues a letter to it.
        ('{"cmd": "curl\\nBearer a1B2c3D4e5F6g7H8i9J0\\n"}', ["a1B2c3D4e5F6g7H8i9J0"]),
        ("curl -H 'Authorization: Bearer a1B2c3D4e5F6g7H8i9J0' https://api.example.com", ["a1B2c3D4e5F6g7H8i9J0"]),
        # Not credentials: other parameters, short values, a word after "bearer".
        ("https://example.com/search?q=presigned+urls&page=2&sort=asc&token=abc", []),
        ("bearer bonds and the Bearer of bad news", []),
    ],
)
def test_a_credential_in_a_url_or_an_authorization_header_written_in_text_is_found(
    text: str, secrets: list[str]
) -> None:
    assert [text[s:e] for s, e in detectors.detector("api_key").find(text)] == secrets


@pytest.mark.parametrize(("name", "value", "expected"), OTHER_CASES)
def test_other_detectors(name: str, value: str, expected: bool) -> None:
    assert _found(name, value) == ([value] if expected else [])


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        # Values glued into ids and keys by code (snake_case, a dash, a suffix) are still found.
        ("email", "jane.doe@example.com-2", "jane.doe@example.com"),
        ("email", "jane@example.com_backup", "jane@example.com"),
        ("email", "turn-jane@example.com1", "turn-jane@example.com"),
        ("email", "https://api.example.org/users?email=jane.doe%40example.com&x=1", "jane.doe%40example.com"),
        # A local part longer than RFC 5321's 64: its last 64 characters and the domain, never nothing.
        ("email", "x" * 70 + "jane@example.com", "x" * 60 + "jane@example.com"),
        # An apostrophe inside a name is part of the address, never its opening quote.
        ("email", "write to o'brien@example.com today", "o'brien@example.com"),
        ("email", "from don't-reply@example.com", "don't-reply@example.com"),
        ("email", "say 'jane@example.com'", "jane@example.com"),
        ("email", "it's jane@example.com", "jane@example.com"),
        ("email", "to o&#39;brien@example.com", "o&#39;brien@example.com"),  # found in the decoded copy
        ("credit_card", "card_4111111111111111", "4111111111111111"),
        ("credit_card", "card-4111 1111 1111 1111", "4111 1111 1111 1111"),
        ("phone", "phone_+44 20 7946 0958", "+44 20 7946 0958"),
        ("phone", "call+44 20 7946 0958", "+44 20 7946 0958"),
        ("phone", "user_415-555-2671", "415-555-2671"),
        ("us_ssn", "ssn_078-05-1120", "078-05-1120"),
        ("ip_address", "host_10.0.4.17", "10.0.4.17"),
        ("ip_address", "addr_fe80::1ff:fe23:4567:890a", "fe80::1ff:fe23:4567:890a"),
        ("jwt", "token_eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"),
        ("api_key", "key_sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ", "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"),
        ("api_key", "token-sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ", "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"),
        ("api_key", "user-AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("jwt", "id-eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"),
        ("iban", "iban_GB82WEST12345698765432", "GB82WEST12345698765432"),
        # Scripts written without spaces between words glue a value to the words around it: it is found all
        # the same, and only it is replaced (the words stay).
        ("credit_card", "カード番号4111 1111 1111 1111です", "4111 1111 1111 1111"),
        ("credit_card", "卡号4111111111111111谢谢", "4111111111111111"),
        ("credit_card", "카드4111-1111-1111-1111로", "4111-1111-1111-1111"),
        ("phone", "電話は(212) 555-0134です", "(212) 555-0134"),
        ("phone", "电话212-555-0134谢谢", "212-555-0134"),
        ("phone", "電話は+81 3 1234 5678です", "+81 3 1234 5678"),
        ("ip_address", "サーバー10.0.4.17です", "10.0.4.17"),
        ("ip_address", "服务器2001:db8::1谢谢", "2001:db8::1"),
        ("ip_address", "ไอพี10.0.4.17ครับ", "10.0.4.17"),
        ("us_ssn", "社保号078-05-1120谢谢", "078-05-1120"),
        ("us_ssn", "番号123-45-6789です", "123-45-6789"),
        ("iban", "口座DE89370400440532013000です", "DE89370400440532013000"),
        ("api_key", "密钥AKIAIOSFODNN7EXAMPLE谢谢", "AKIAIOSFODNN7EXAMPLE"),
    ],
)
def test_a_value_glued_to_other_text_is_found(name: str, text: str, value: str) -> None:
    assert _found(name, text) == [value]


def test_a_policy_redacts_a_card_glued_to_japanese_and_keeps_the_words() -> None:
    policy = RedactionPolicy([Rule("redact", detector="credit_card")])
    assert policy.redact_text("カード番号4111 1111 1111 1111です") == "カード番号[REDACTED:credit_card]です"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        # ... but a digit run inside a longer one, or a word's letters around it, is not a value.
        ("credit_card", "2024-4111111111111111"),
        ("credit_card", "a4111111111111111b"),
        ("credit_card", "Zahlungé4111111111111111"),  # a letter of a spaced script, as a Latin one
        ("ip_address", "v10.0.4.17"),
        ("us_ssn", "1-078-05-1120"),
        ("ip_address", "1.10.0.4.17"),
        ("phone", "12+44 20 7946 0958"),
        ("api_key", "mask-proj-abcdefghijklmnopqrstuvwxyz012345"),
    ],
)
def test_a_run_inside_a_longer_one_is_not_a_value(name: str, text: str) -> None:
    assert _found(name, text) == []


def test_the_tables_are_large_enough() -> None:
    for table in (CARD_CASES, PHONE_CASES, KEY_CASES):
        assert len(table) >= 20
        assert {found for _, found in table} == {True, False}


def test_several_values_in_one_text_are_found_in_order() -> None:
    text = "call +44 20 7946 0958 or (415) 555-2671 today"
    assert [text[s:e] for s, e in detectors.detector("phone").find(text)] == ["+44 20 7946 0958", "(415) 555-2671"]


def test_luhn_and_iban_checks() -> None:
    assert detectors.luhn_ok("79927398713") and not detectors.luhn_ok("79927398710")
    assert detectors.iban_ok("GB82WEST12345698765432") and not detectors.iban_ok("GB82WEST12345698765431")


def test_unknown_detector_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown detector 'emails'.*email, phone, credit_card"):
        detectors.detector("emails")


def test_presidio_without_its_package_names_the_extra() -> None:
    try:
        import presidio_analyzer  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"relay-runtime\[pii\]"):
            detectors.detector("presidio")
    else:  # pragma: no cover - with the pii extra installed
        pytest.skip("presidio-analyzer is installed")
