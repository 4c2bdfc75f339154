"""Name normalization and query understanding: company, document-type and period keys as the index
spells them, the company names and aliases a query may use, the years, trading symbols and defined
terms it names, and the text that ranks once a filter has chosen the documents."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_LEGAL_FORMS = {
    "inc",
    "corp",
    "corporation",
    "co",
    "company",
    "ltd",
    "llc",
    "plc",
    "lp",
    "l",
    "p",
    "com",
    "the",
    "sa",
    "nv",
    "ag",
}


LEGAL_FORMS = frozenset(_LEGAL_FORMS)  # "plc", "inc", ...: words that name no company on their own


def company_words(name: str | None) -> list[str]:
    """'Amazon.com, Inc.' -> ['amazon']: lower-case words, legal suffixes dropped."""
    words = re.sub(r"[^a-z0-9& ]", " ", (name or "").lower()).split()
    while len(words) > 1 and words[-1] in _LEGAL_FORMS:
        words.pop()
    return words


def company_key(name: str | None) -> str | None:
    """'Amazon.com, Inc.' / 'AMAZON' -> 'amazon': lower-case letters and digits, legal suffixes dropped."""
    return "".join(company_words(name)) or None


def abbreviates(word: str, name: str | None) -> bool:
    """Whether `word` (four letters or more) abbreviates a company name of two words or more by the first
    two letters or more of each word, in order: "AMEX" / "AmEx" for American Express; not its initials."""
    words = [w for w in company_words(name) if w.isalnum()]
    if len(word) < 4 or len(words) < 2:
        return False

    def spelled(rest: str, words: list[str]) -> bool:
        if not words:
            return not rest
        return any(
            rest[:n] == words[0][:n] and spelled(rest[n:], words[1:])
            for n in range(2, min(len(words[0]), len(rest)) + 1)
        )

    return spelled(word.lower(), words)


def doc_type_key(doc_type: str | None) -> str | None:
    """'10-K', '10k', '10K' -> '10k'; 'Credit Agreement' -> 'creditagreement'."""
    return re.sub(r"[^a-z0-9.]", "", doc_type.lower()) if doc_type else None


def periods(period: str | None) -> list[str]:
    """A period and its year, so `--period 2023` matches '2023-01-03' and '2023Q4'."""
    if not period:
        return []
    year = re.search(r"(19|20)\d\d", period)
    return sorted({period, year.group(0)} if year else {period})


@dataclass
class Recognised:
    """Company and period a query names, as the index spells them, and where the query names them."""

    company: str | None = None  # the company key (the first of `companies`)
    period: str | None = None
    terms: list[str] = field(default_factory=list)
    companies: list[str] = field(default_factory=list)  # every company key the name stands for ("Kimco": two entities)
    company_spans: list[tuple[int, int]] = field(default_factory=list)  # where the query names the company
    contested: dict[str, list[str]] = field(default_factory=dict)  # a name the query uses -> the companies claiming it
    year_spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # year -> where the query names it


_YEAR = re.compile(r"\b(?:FY|fiscal(?: year)?\s*)?'?((?:19|20)\d\d)\b|\bFY\s?'?(\d\d)\b", re.I)


def query_years(query: str) -> list[str]:
    """Years a query names: '2022', 'FY2022', 'FY22', 'fiscal 2022'."""
    return [year for year, _ in year_spans(query)]


def year_spans(query: str) -> list[tuple[str, tuple[int, int]]]:
    return [(match[1] or f"20{match[2]}", match.span()) for match in _YEAR.finditer(query)]


_WORD = re.compile(r"[A-Za-z0-9&]+(?:['’][A-Za-z0-9&]+)*['’]?")


def query_words(query: str) -> list[tuple[str, int, int, str]]:
    """(company-key spelling, start, end, as written) of each word: lower case, a possessive dropped ("Amcor's",
    "Express'")."""
    out = []
    for match in _WORD.finditer(query):
        written = match[0]
        bare = re.sub(r"['’]s?$", "", written)
        out.append((re.sub(r"['’]", "", bare.lower()), match.start(), match.end(), written))
    return out


def query_phrases(query: str) -> set[str]:
    """Runs of up to five consecutive words, joined as company keys are ('american express' -> 'americanexpress')."""
    words = [w for w, *_ in query_words(query)]
    return {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, min(i + 6, len(words) + 1))}


def query_tickers(query: str) -> list[str]:
    """Words a query may write as a trading symbol: two to five capitals ("JPM"; "FL" only so; not the word
    "A"), or three letters or more with a capital inside ("JnJ" for JNJ; never "key", "Key" or "all")."""
    return [word.upper() for word, _ in ticker_spans(query)]


def ticker_spans(query: str) -> list[tuple[str, tuple[int, int]]]:
    return [
        (m[0], m.span())
        for m in re.finditer(r"\b[A-Za-z]{2,5}(?:\.[A-Z])?\b", query)
        if m[0].isupper() or (len(m[0]) >= 3 and not m[0].islower() and not m[0].istitle())
    ]


def query_terms(query: str, terms: set[str]) -> list[str]:
    """The defined terms (of two words or more) a query names with their capitals ("Maturity Date" in
    "Kimco term loan Maturity Date", not "maturity date"; a plural names its singular), minus those
    inside a longer one it names."""
    words = re.findall(r"[\w&'’.-]+", query)
    named = {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 2, min(i + 9, len(words) + 1))}
    named |= {phrase[:-1] for phrase in named if phrase.endswith("s")}  # "Restricted Payments": "Restricted Payment"
    found = sorted(named & terms, key=len, reverse=True)
    return [
        t for i, t in enumerate(found) if not any(re.search(rf"\b{re.escape(t)}\b", longer) for longer in found[:i])
    ]


# First words too common to stand for a company on their own ("American" is not American Express).
_GENERIC = set(
    """
a an and the of for first american general national international global united new old north south east west
northern southern eastern western central pacific atlantic capital credit financial bank trust health home homes
realty properties commercial technology technologies systems services industries holdings group partners energy
royal standard great best premier advanced applied digital data power life lifetime stone point growth drug
host bird duck now runway jones smith key fair city state us usa""".split()
)


def name_variants(name: str | None) -> list[str]:
    """The names one company value holds: 'NOW Inc. / DNOW L.P.' -> both; 'RYAM Lux SARL (Rayonier Advanced
    Materials)' -> both."""
    if not name:
        return []
    inner = re.findall(r"\(([^)]*)\)", name)
    outer = re.sub(r"\([^)]*\)", " ", name)
    return [v.strip() for v in re.split(r"\s*/\s*|;", outer) + inner if v.strip()]


def aliases(name: str) -> dict[str, bool]:
    """Company-key spellings that name `name` in a query -> whether the alias is one word (those must be
    written with a capital). 'Duck Creek Technologies LLC' -> duckcreektechnologies, duckcreek, (duck: too
    common); 'Kimco Realty OP, LLC' -> kimcorealtyop, kimcorealty, kimco. Legal forms and a leading 'the'
    are dropped; a first word is an alias alone when it has four letters or more and is not a common word."""
    found: dict[str, bool] = {}
    for variant in name_variants(name):
        words = company_words(variant)
        words = words[1:] if len(words) > 1 and words[0] == "the" else words
        words = [w for w in words if w.replace("&", "")]
        if not words:
            continue
        found["".join(words)] = len(words) == 1
        for n in range(2, len(words)):
            found.setdefault("".join(words[:n]), False)
        first = words[0]
        if len(words) > 1 and (len(first) >= 4 or any(ch.isdigit() for ch in first)) and first not in _GENERIC:
            found.setdefault(first, True)
    return found


def alias_table(
    names: dict[str, set[str]], contested: dict[str, set[str]] | None = None
) -> dict[str, tuple[set[str], bool]]:
    """alias -> (the company keys it names, one word?), over the index's companies (key -> the names its
    documents give it: company values and "the Borrower" entities). A one-word alias shared by companies
    that do not share a two-word alias ("Kimco" for Kimco Realty Corporation and Kimco Realty OP) is dropped,
    unless it is one of them's whole name: then it names them all (a company renamed between its filings,
    "Adobe Systems Incorporated" and "Adobe Inc."). `contested` receives each dropped alias -> the companies
    that claim it (a search names them rather than filter)."""
    table: dict[str, tuple[set[str], bool]] = {}
    for key, spellings in names.items():
        for spelling in spellings:
            for alias, single in aliases(spelling).items():
                keys, was_single = table.get(alias, (set(), single))
                table[alias] = (keys | {key}, was_single and single)
    for alias, (keys, single) in list(table.items()):
        if (
            single
            and len(keys) > 1
            and alias not in keys
            and not any(
                not one and other.startswith(alias) and other != alias and shared == keys
                for other, (shared, one) in table.items()
            )
        ):
            del table[alias]
            if contested is not None:
                contested[alias] = keys
    return table


def written_as_name(words: list[tuple[str, int, int, str]], i: int, alias: str) -> bool:
    """Whether the one word at `i` is written as a name: with a capital; and a common word ("Now" for NOW Inc.)
    as the query's first word or anywhere only in capitals throughout, or as a possessive."""
    _, start, end, written = words[i]
    if not written[:1].isupper() and not written[:1].isdigit():
        return False
    bare = re.sub(r"['’]s?$", "", written)
    if alias not in _GENERIC:
        return True
    return bare != written or (bare.isupper() and len(bare) > 1) or any(ch.isdigit() for ch in bare)


# Capitalised words whose possessive names no company ("the Company's", "the Board's", "Fiscal Year's").
_NOT_A_COMPANY = _GENERIC | set(
    """company companies corporation firm board management year quarter fiscal segment segments business
nation nation's country world today fund registrant issuer borrower lender lenders agent parent subsidiary
i we our its""".split()
)
_LEAD = set("the what which who how when where why does did do is was were are has have had in on for by and".split())


def possessive_names(query: str) -> list[str]:
    """The names a query writes in the possessive with capitals ("Tesla's", "Best Buy's", "Procter & Gamble's"):
    what a question names as the company it asks about, recognised or not."""
    found = []
    for match in re.finditer(r"((?:[A-Z0-9][\w.&-]*\s+|&\s+)*[A-Z0-9][\w.&-]*)['’]s?(?!\w)", query):
        words = match[1].split()
        while words and (words[0].lower() in _LEAD or words[0] == "&" or re.fullmatch(r"(?:FY|Q[1-4])?\d*", words[0])):
            words = words[1:]
        if words and not all(w.lower() in _NOT_A_COMPANY for w in words) and not words[-1].isdigit():
            found.append(" ".join(words))
    return found


def ranking_text(query: str, spans: Sequence[tuple[int, int]]) -> str:
    """The query without the words that chose the filter (a company name with its possessive, a year): what
    ranks the chunks once the filter has chosen the documents. The query itself when nothing would be left."""
    if not spans:
        return query
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:
            continue
        out.append(query[at:start])
        at = end
        while at < len(query) and query[at] in "'’s" and query[at - 1] in "'’":  # "Kimco's": the possessive too
            at += 1
    out.append(query[at:])
    text = re.sub(r"\s+([?.!,;:])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip(" ,;")
    return text if re.search(r"\w", text) else query
