"""Document summaries (model through the gateway, or extractive) and key entities on real agreements."""

from __future__ import annotations

from finmbs.ingest.parse import parse_file
from finmbs.ingest.summarize import extract_entities, summarize
from finmbs.llm import Gateway


def test_entities_of_a_credit_agreement(shared_data):
    doc = parse_file(shared_data / "credit_agreements/docs/brown_forman_2023_credit_agreement.txt")[0]
    entities = extract_entities(doc.text)
    assert entities["borrower"] == ["BROWN-FORMAN CORPORATION"]
    assert "U.S. BANK NATIONAL ASSOCIATION (Administrative Agent)" in entities["agents"]
    assert "Revolving Credit Facilities" in entities["facilities"]
    assert "$125,000,000" in entities["amounts"]


async def test_extractive_summary_without_model(shared_data):
    doc = parse_file(shared_data / "credit_agreements/docs/amazon_2023_term_loan_agreement.html")[0]
    summary, entities = await summarize(doc)
    assert "TERM LOAN AGREEMENT dated as of January 3, 2023" in summary and len(summary) <= 1000
    assert entities["borrower"] == ["AMAZON.COM, INC."]


async def test_model_summary_through_gateway(shared_data, openai_server, make_endpoint):
    openai_server.script("A $1.0 billion term loan agreement of Amazon.com, Inc. with TD as agent.")
    doc = parse_file(shared_data / "credit_agreements/docs/amazon_2023_term_loan_agreement.html")[0]
    gateway = Gateway(cache_path=None)
    summary, _ = await summarize(doc, gateway, make_endpoint("summarizer"))
    assert summary.startswith("A $1.0 billion term loan")
    request = openai_server.requests[0]
    assert "Term Loan Agreement" in request.text and "AMAZON.COM, INC." in request.text
    assert gateway.usage["summarizer"].calls == 1
