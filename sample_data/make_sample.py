#!/usr/bin/env python3
"""Generate the bundled sample annotation project (a synthetic English NER corpus).

Everything here is made up by this script: sentences come from news, business, technology,
sports and politics templates whose slots are filled from word lists (people, organisations,
places, dates, money amounts, products, numbers).  Each token gets a coarse part-of-speech tag
from the word list it came from and a BIO label over five entity types: PER, ORG, LOC, DATE
and MONEY.

Output (three files, CRF++ column format ``token TAG LABEL``, one blank line after each
sentence):

* ``sample_gold.conll`` -- every sentence with its gold labels;
* ``sample.conll``      -- the same sentences as an annotation project first sees them: the first
  30% fully labeled, the next 30% partially labeled (30-60% of the labels replaced by ``_``),
  the rest unlabeled (all ``_``);
* ``template``          -- a CRF++ feature template for these two columns.

The script uses only the standard library and a fixed seed, so running it again rewrites the
committed files byte for byte::

    python sample_data/make_sample.py            # writes next to this script
    python sample_data/make_sample.py --out DIR  # writes into DIR
"""

from __future__ import annotations

import argparse
import math
import random
import re
from pathlib import Path

SEED = 20240611
N_SENTENCES = 400
FULL_FRACTION = 0.30  # first 30% of the sentences are fully labeled
PARTIAL_FRACTION = 0.30  # next 30% are partially labeled
HIDE_MIN, HIDE_MAX = 0.30, 0.60  # share of missing labels in a partially labeled sentence
MIN_LEN, MAX_LEN = 5, 40
MISSING = "_"

TEMPLATE = """\
# Unigram: tokens in a -2..2 window
U00:%x[-2,0]
U01:%x[-1,0]
U02:%x[0,0]
U03:%x[1,0]
U04:%x[2,0]
U05:%x[-1,0]/%x[0,0]
U06:%x[0,0]/%x[1,0]

# Unigram: tags in a -2..2 window
U10:%x[-2,1]
U11:%x[-1,1]
U12:%x[0,1]
U13:%x[1,1]
U14:%x[2,1]
U15:%x[-2,1]/%x[-1,1]
U16:%x[-1,1]/%x[0,1]
U17:%x[0,1]/%x[1,1]
U18:%x[1,1]/%x[2,1]

U20:%x[-2,1]/%x[-1,1]/%x[0,1]
U21:%x[-1,1]/%x[0,1]/%x[1,1]
U22:%x[0,1]/%x[1,1]/%x[2,1]

# Token and tag together
U30:%x[0,0]/%x[0,1]

# Bigram
B
"""

# --------------------------------------------------------------------------------------------
# Word lists for entities (all tagged NNP unless noted)
# --------------------------------------------------------------------------------------------

FIRST_NAMES = """
James Maria Wei Aisha Carlos Priya Olivia Kenji Fatima Lukas Sofia Daniel Amara Mateo Ingrid
Rahul Chloe Dmitri Elena Kwame Hannah Jorge Mei Samuel Nadia Tomas Grace Omar Laura Yusuf Emily
Andre Zara Patrick Leila Hiroshi Rebecca Viktor Anna Thomas Ngozi Felix Isabel Marcus Sara Ravi
Julia Stefan Camila Peter Lena Ahmed Claire Diego Hana Robert Alice Ivan Bianca Michael
""".split()

LAST_NAMES = """
Chen Okafor Schmidt Rodriguez Patel Nakamura Johansson Dubois Kowalski Haddad Silva Novak Murphy
Rossi Tanaka Mensah Fischer Alvarez Singh Petrov Lindqvist Moreau Kim Hughes Bauer Castillo Osei
Yamamoto Walsh Ibrahim Bergman Costa Weber Morales Sato Lopez O'Brien Reyes Gallagher Varga Mwangi
Hoffman Duarte Kaur Lindgren Fontaine Abbott Brennan Carter Delgado Ellis Farah Grant Hale Iyer
Jensen Keller Lambert Mercer
""".split()

ORG_STEMS = """
Northwind Helix Bluestone Crescent Vantage Orion Meridian Summit Redwood Apex Harbor Quantum
Silverline Granite Lumen Cobalt Everest Pinnacle Westfield Aurora Sterling Ironbridge Kestrel
Nova Beacon Cedar Falcon Zenith Atlas Juniper
""".split()

ORG_KINDS = """
Systems Bank Motors Energy Pharmaceuticals Airlines Capital Telecom Foods Robotics Media
Insurance Logistics Networks Holdings Analytics Semiconductors Partners Retail Mining
""".split()

ORG_DESIGNATORS = ["Inc.", "Corp.", "Ltd.", "Group", "AG"]

CENTRAL_BANKS = [
    "Federal Reserve",
    "European Central Bank",
    "Bank/NNP of/IN Japan",
    "Bank/NNP of/IN England",
    "Reserve Bank/NNP of/IN India",
    "Swiss National Bank",
]
REGULATORS = [
    "Securities/NNPS and/CC Exchange/NNP Commission",
    "Competition Authority",
    "European Commission",
    "Financial Conduct Authority",
    "Federal Trade Commission",
    "Ministry/NNP of/IN Finance",
]
AGENCIES = [
    "World Health Organization",
    "United Nations",
    "International Monetary Fund",
    "World Bank",
    "European Commission",
    "Red Cross",
    "African Development Bank",
    "Asian Development Bank",
]

CLUB_TOWNS = """
Riverside Kingsport Lakewood Ashford Millbrook Eastbridge Fairhaven Brookfield Stonehaven Westbury
Oakham Redcliffe
""".split()

CLUB_KINDS = ["United", "Rovers", "Athletic", "Wanderers", "FC", "City"]

CITIES = """
London Paris Tokyo Nairobi Toronto Berlin Mumbai Sydney Chicago Madrid Seoul Lagos Cairo Lima
Oslo Dublin Singapore Jakarta Warsaw Lisbon Vienna Boston Denver Manila Accra Hanoi Santiago
Frankfurt Geneva Osaka Melbourne Zurich Stockholm Bangalore Dubai Montreal
""".split() + [
    "New York",
    "San Francisco",
    "Hong Kong",
    "Buenos Aires",
    "Los Angeles",
    "Cape Town",
    "Mexico City",
    "Kuala Lumpur",
    "Rio de/IN Janeiro",
    "Tel Aviv",
]

COUNTRIES = """
Germany Brazil Japan Kenya Canada India France Australia Nigeria Chile Norway Vietnam Egypt
Mexico Poland Spain Ghana Indonesia Italy Sweden Argentina Turkey Portugal Ireland Peru
""".split() + [
    "South Korea",
    "United States",
    "New Zealand",
    "South Africa",
    "United Kingdom",
    "Saudi Arabia",
]

REGIONS = ["Europe", "Asia", "Latin America", "East Africa", "Middle East", "Scandinavia"]

WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = (
    "January February March April May June July August September October November December"
).split()
RELATIVE_DATES = [
    "last/JJ year/NN",
    "last/JJ week/NN",
    "last/JJ month/NN",
    "this/DT year/NN",
    "this/DT week/NN",
    "earlier/RBR this/DT month/NN",
    "yesterday/NN",
    "last/JJ spring/NN",
    "two/CD years/NNS ago/RB",
    "last/JJ Friday/NNP",
]
FUTURE_DATES = [
    "next/JJ year/NN",
    "next/JJ month/NN",
    "next/JJ week/NN",
    "next/JJ summer/NN",
    "later/RB this/DT year/NN",
    "tomorrow/NN",
    "next/JJ spring/NN",
]
QUARTERS = ["first/JJ quarter/NN", "second/JJ quarter/NN", "third/JJ quarter/NN",
            "fourth/JJ quarter/NN"]

CURRENCIES = [("dollars", "NNS"), ("euros", "NNS"), ("pounds", "NNS"), ("yen", "NN"),
              ("rupees", "NNS"), ("francs", "NNS")]
SYMBOLS = ["$", "$", "$", "EUR", "GBP"]

PRODUCT_NAMES = """
Nimbus Pulse Vertex Echo Spark Titan Lyra Comet Aria Quasar Halo Orbit Prism Flux Nomad Ember
""".split()
PRODUCT_MODELS = ["X2", "Pro", "Max", "Air", "Mini", "Ultra", "3", "5", "Lite", "Edge"]

# --------------------------------------------------------------------------------------------
# The grammar.  An alternative is a string of ``word/TAG`` tokens and ``{SLOT}`` references;
# a word without a tag inside an entity list is NNP.
# --------------------------------------------------------------------------------------------

GRAMMAR: dict[str, list[str]] = {
    "S": [
        "{MAIN} ./PUNCT",
        "{SHORT} ./PUNCT",
        "{SHORT} ./PUNCT",
        "{OPENER} {MAIN} ./PUNCT",
        "{MAIN} {EXT} ./PUNCT",
        "{OPENER} {MAIN} {EXT} ./PUNCT",
        "{MAIN} {EXT} {EXT} ./PUNCT",
        '"/PUNCT {QUOTE} ,/PUNCT "/PUNCT {SAYS} {EXT} ./PUNCT',
        "{MAIN} ,/PUNCT {WHILE} ./PUNCT",
        "{MAIN} ,/PUNCT {WHILE} {EXT} ./PUNCT",
        "{MAIN} ;/PUNCT {MAIN} ./PUNCT",
        "{MAIN} ,/PUNCT and/CC {MAIN} {EXT} ./PUNCT",
    ],
    "SHORT": [
        "{PER} resigned/VBD {WHEN}",
        "{COMPANY} shares/NNS {MOVED} {PCT}",
        "{PER} arrived/VBD in/IN {CITY}",
        "{CLUB} won/VBD again/RB",
        "{PER} joined/VBD {COMPANY}",
        "{PER} won/VBD in/IN {CITY}",
        "prices/NNS rose/VBD in/IN {COUNTRY}",
        "markets/NNS closed/VBD early/RB {WHEN}",
        "{COMPANY} hired/VBD {PER}",
        "{PER_SHORT} denied/VBD the/DT report/NN",
        "{CITY} hosted/VBD the/DT summit/NN",
        "{COUNTRY} beat/VBD {COUNTRY} {SCORE}",
        "{ORG} cut/VBD costs/NNS",
    ],
    "OPENER": [
        "meanwhile/RB ,/PUNCT",
        "however/RB ,/PUNCT",
        "in/IN {CITY} ,/PUNCT",
        "on/IN {D_DAY} ,/PUNCT",
        "earlier/RBR ,/PUNCT",
        "separately/RB ,/PUNCT",
        "{D_REL} ,/PUNCT",
        "as/IN expected/VBN ,/PUNCT",
    ],
    "MAIN": [
        "{BUSINESS}", "{BUSINESS}", "{BUSINESS}", "{TECH}", "{TECH}", "{SPORTS}", "{SPORTS}",
        "{NEWS}", "{NEWS}",
    ],
    "BUSINESS": [
        "{COMPANY} said/VBD {WHEN} that/IN its/PRP$ {METRIC} rose/VBD {PCT} to/TO {MONEY}",
        "{COMPANY} agreed/VBD to/TO buy/VB {COMPANY} for/IN {MONEY}",
        "shares/NNS of/IN {COMPANY} {MOVED} {PCT}",
        "{COMPANY} will/MD cut/VB {NUM} jobs/NNS",
        "the/DT board/NN of/IN {COMPANY} named/VBD {PER} as/IN its/PRP$ new/JJ {ROLE}",
        "{PER} ,/PUNCT the/DT {ROLE} of/IN {COMPANY} ,/PUNCT said/VBD {METRIC} would/MD "
        "{CHANGE} {WHEN_FUT}",
        "{COMPANY} plans/VBZ to/TO open/VB a/DT new/JJ {FACILITY} in/IN {CITY}",
        "{COMPANY} posted/VBD a/DT {RESULT} of/IN {MONEY} for/IN the/DT {D_QUARTER}",
        "investors/NNS {REACTED} after/IN {COMPANY} {ADJUSTED} its/PRP$ {FORECAST}",
        "{CENTRAL_BANK} {ADJUSTED} interest/NN rates/NNS {WHEN}",
        "{COMPANY} sold/VBD its/PRP$ stake/NN in/IN {COMPANY} to/TO {PER} for/IN {MONEY}",
        "{COMPANY} is/VBZ moving/VBG its/PRP$ headquarters/NN from/IN {CITY} to/TO {CITY}",
        "profits/NNS at/IN {COMPANY} doubled/VBD",
        "{COMPANY} declined/VBD to/TO comment/VB",
        "{REGULATOR} fined/VBD {COMPANY} {MONEY} over/IN {ISSUE}",
        "{COMPANY} raised/VBD {MONEY} from/IN investors/NNS including/VBG {COMPANY}",
        "{PER} bought/VBD a/DT controlling/VBG stake/NN in/IN {COMPANY}",
        "{COMPANY} and/CC {COMPANY} announced/VBD a/DT {MONEY} merger/NN",
        "{METRIC} at/IN {COMPANY} {MOVED} {PCT} in/IN {LOC}",
        "{COMPANY} won/VBD a/DT {MONEY} contract/NN to/TO supply/VB {GOODS} to/TO {COUNTRY}",
        "analysts/NNS expect/VBP {COMPANY} to/TO report/VB {METRIC} of/IN {MONEY}",
        "{COMPANY} opened/VBD {NUM} new/JJ stores/NNS across/IN {REGION}",
    ],
    "TECH": [
        "{COMPANY} unveiled/VBD the/DT {PRODUCT} ,/PUNCT a/DT {TECH_ADJ} {GADGET} priced/VBN "
        "at/IN {PRICE}",
        "{PER} demonstrated/VBD the/DT new/JJ {GADGET} at/IN a/DT conference/NN in/IN {CITY}",
        "the/DT {PRODUCT} will/MD go/VB on/IN sale/NN in/IN {COUNTRY} {WHEN_FUT} for/IN {PRICE}",
        "{COMPANY} released/VBD a/DT software/NN update/NN for/IN the/DT {PRODUCT}",
        "engineers/NNS at/IN {COMPANY} built/VBD a/DT {GADGET} that/WDT {TECH_VP}",
        "{COMPANY} recalled/VBD {NUM} {PRODUCT} units/NNS because/IN of/IN a/DT faulty/JJ "
        "battery/NN",
        "{PER} founded/VBD {COMPANY} in/IN {CITY} in/IN {D_YEAR}",
        "users/NNS in/IN {LOC} reported/VBD outages/NNS",
        "{COMPANY} invested/VBD {MONEY} in/IN a/DT {TECH_FIELD} startup/NN based/VBN in/IN {CITY}",
        "hackers/NNS stole/VBD data/NNS from/IN {NUM} customers/NNS of/IN {COMPANY}",
        "{COMPANY} will/MD build/VB a/DT {MONEY} data/NN center/NN near/IN {CITY}",
        "the/DT {PRODUCT} sold/VBD {NUM} units/NNS in/IN its/PRP$ first/JJ week/NN",
        "{PER} ,/PUNCT who/WP leads/VBZ {TECH_FIELD} research/NN at/IN {COMPANY} ,/PUNCT "
        "left/VBD the/DT company/NN",
        "{COMPANY} licensed/VBD its/PRP$ {TECH_FIELD} technology/NN to/TO {COMPANY}",
    ],
    "SPORTS": [
        "{CLUB} beat/VBD {CLUB} {SCORE} {WHEN}",
        "{PER} scored/VBD twice/RB as/IN {CLUB} won/VBD the/DT {COMPETITION} final/NN in/IN "
        "{CITY}",
        "{CLUB} signed/VBD {POSITION} {PER} from/IN {CLUB} for/IN {MONEY}",
        "{PER} won/VBD the/DT {RACE} in/IN {CITY}",
        "the/DT {COUNTRY} team/NN arrived/VBD in/IN {CITY} {WHEN}",
        "coach/NN {PER} was/VBD sacked/VBN after/IN a/DT {SCORE} defeat/NN to/TO {CLUB}",
        "{PER} will/MD miss/VB the/DT rest/NN of/IN the/DT season/NN with/IN a/DT {INJURY} "
        "injury/NN",
        "{PER} set/VBD a/DT new/JJ world/NN record/NN",
        "{CLUB} and/CC {CLUB} drew/VBD {SCORE} in/IN front/NN of/IN {NUM} fans/NNS",
        "{PER_SHORT} has/VBZ scored/VBN {NUM_SMALL} goals/NNS this/DT season/NN",
        "{COUNTRY} will/MD host/VB the/DT {COMPETITION} in/IN {D_YEAR}",
        "{CLUB} fired/VBD manager/NN {PER} {WHEN}",
    ],
    "NEWS": [
        "{PER} met/VBD {PER} in/IN {CITY} to/TO discuss/VB {ISSUE}",
        "the/DT {AGENCY} approved/VBD a/DT {MONEY} aid/NN package/NN for/IN {COUNTRY}",
        "{COUNTRY} will/MD hold/VB elections/NNS {WHEN_FUT}",
        "a/DT {DISASTER} hit/VBD {LOC} {WHEN} ,/PUNCT killing/VBG {NUM_SMALL} people/NNS",
        "thousands/NNS of/IN people/NNS protested/VBD in/IN {CITY} against/IN {ISSUE}",
        "{PER} ,/PUNCT who/WP became/VBD {POL_ROLE} {WHEN} ,/PUNCT resigned/VBD",
        "officials/NNS in/IN {COUNTRY} signed/VBD a/DT trade/NN agreement/NN with/IN {COUNTRY}",
        "{PER} arrived/VBD in/IN {CITY}",
        "the/DT {AGENCY} warned/VBD that/IN {ISSUE} could/MD slow/VB growth/NN in/IN {REGION}",
        "police/NNS in/IN {CITY} arrested/VBD {NUM_SMALL} people/NNS",
        "{POL_ROLE} {PER} visited/VBD {COUNTRY} for/IN talks/NNS on/IN {ISSUE}",
        "the/DT {AGENCY} said/VBD {COUNTRY} needs/VBZ {MONEY} to/TO rebuild/VB after/IN "
        "the/DT {DISASTER}",
        "{PER} was/VBD elected/VBN mayor/NN of/IN {CITY}",
    ],
    "EXT": [
        ",/PUNCT {SAYS}",
        ",/PUNCT {SAYS}",
        "{WHEN}",
        "{WHEN}",
        "in/IN {LOC}",
        ",/PUNCT according/VBG to/TO {SOURCE}",
        "amid/IN {ISSUE}",
        ",/PUNCT citing/VBG {ISSUE}",
        "despite/IN {ISSUE}",
    ],
    "SAYS": [
        "{SPEAKER} said/VBD",
        "{SPEAKER} said/VBD",
        "{SPEAKER} told/VBD reporters/NNS",
        "{PER} ,/PUNCT {ROLE_AT} ,/PUNCT said/VBD",
        "{SPEAKER} said/VBD in/IN a/DT statement/NN",
    ],
    "WHILE": [
        "while/IN shares/NNS of/IN {COMPANY} {MOVED} {PCT}",
        "while/IN {PER} stayed/VBD in/IN {CITY}",
        "while/IN rivals/NNS in/IN {COUNTRY} struggled/VBD",
        "after/IN {ISSUE} hurt/VBD demand/NN",
        "although/IN {COMPANY} disputed/VBD the/DT figures/NNS",
        "and/CC {PER_SHORT} expects/VBZ a/DT recovery/NN by/IN {D_MONTHISH}",
    ],
    "SPEAKER": [
        "{PER}",
        "{PER_SHORT}",
        "a/DT spokesperson/NN for/IN {ORG}",
        "{ROLE} {PER}",
        "an/DT analyst/NN at/IN {COMPANY}",
        "officials/NNS",
    ],
    "SOURCE": [
        "{INSTITUTION}",
        "analysts/NNS at/IN {COMPANY}",
        "a/DT report/NN by/IN {COMPANY}",
        "{PER}",
        "a/DT statement/NN from/IN {ORG}",
        "people/NNS familiar/JJ with/IN the/DT matter/NN",
    ],
    "ROLE_AT": [
        "a/DT {ROLE} at/IN {COMPANY}",
        "the/DT {ROLE} of/IN {ORG}",
        "a/DT professor/NN at/IN the/DT University/NNP of/IN {CITY}",
        "an/DT economist/NN at/IN {AGENCY}",
    ],
    "QUOTE": [
        "we/PRP are/VBP very/RB pleased/JJ with/IN the/DT result/NN",
        "this/DT is/VBZ a/DT difficult/JJ time/NN for/IN everyone/NN",
        "the/DT numbers/NNS speak/VBP for/IN themselves/PRP",
        "we/PRP expect/VBP a/DT strong/JJ second/JJ half/NN",
        "our/PRP$ customers/NNS deserve/VBP better/JJR",
        "nobody/NN saw/VBD this/DT coming/VBG",
        "the/DT team/NN played/VBD with/IN real/JJ courage/NN",
        "we/PRP will/MD not/RB raise/VB prices/NNS {WHEN_FUT}",
        "{COMPANY} remains/VBZ committed/VBN to/TO {LOC}",
        "it/PRP was/VBD the/DT best/JJS match/NN of/IN my/PRP$ career/NN",
    ],
    "WHEN": [
        "on/IN {D_DAY}", "on/IN {D_DAY}", "in/IN {D_MONTHISH}", "{D_REL}", "{D_REL}",
        "in/IN the/DT {D_QUARTER}", "in/IN {D_YEAR}",
    ],
    "WHEN_FUT": [
        "on/IN {D_DAY}", "in/IN {D_MONTHISH}", "{D_REL_FUT}", "{D_REL_FUT}", "by/IN {D_MONTHISH}",
        "in/IN the/DT {D_QUARTER}",
    ],
    "LOC": ["{CITY}", "{CITY}", "{COUNTRY}", "{COUNTRY}", "{REGION}"],
    "ORG": ["{COMPANY}", "{COMPANY}", "{INSTITUTION}", "{CLUB}"],
    "INSTITUTION": ["{CENTRAL_BANK}", "{REGULATOR}", "{AGENCY}"],
    "METRIC": [
        "revenue/NN", "net/JJ profit/NN", "quarterly/JJ sales/NNS", "operating/VBG income/NN",
        "online/JJ sales/NNS", "annual/JJ earnings/NNS", "advertising/NN revenue/NN",
        "profit/NN", "sales/NNS",
    ],
    "MOVED": [
        "fell/VBD", "rose/VBD", "jumped/VBD", "slipped/VBD", "climbed/VBD", "dropped/VBD",
        "gained/VBD", "tumbled/VBD",
    ],
    "CHANGE": ["grow/VB", "fall/VB", "recover/VB", "stabilise/VB", "improve/VB"],
    "ROLE": [
        "chief/JJ executive/NN", "finance/NN director/NN", "chairman/NN", "founder/NN",
        "chief/JJ technology/NN officer/NN", "head/NN of/IN research/NN", "president/NN",
        "senior/JJ analyst/NN", "general/JJ counsel/NN", "managing/VBG director/NN",
    ],
    "POL_ROLE": [
        "prime/JJ minister/NN", "finance/NN minister/NN", "president/NN", "foreign/JJ minister/NN",
        "governor/NN", "health/NN minister/NN",
    ],
    "FACILITY": [
        "factory/NN", "research/NN center/NN", "office/NN", "warehouse/NN", "battery/NN plant/NN",
        "distribution/NN hub/NN", "flagship/NN store/NN",
    ],
    "RESULT": ["loss/NN", "profit/NN", "net/JJ loss/NN", "record/JJ profit/NN"],
    "REACTED": ["sold/VBD shares/NNS", "cheered/VBD", "reacted/VBD calmly/RB", "panicked/VBD"],
    "ADJUSTED": ["cut/VBD", "raised/VBD", "lowered/VBD", "kept/VBD", "revised/VBD"],
    "FORECAST": [
        "profit/NN forecast/NN", "sales/NNS outlook/NN", "annual/JJ guidance/NN",
        "dividend/NN", "growth/NN target/NN",
    ],
    "ISSUE": [
        "rising/VBG inflation/NN", "the/DT new/JJ tax/NN law/NN", "trade/NN tariffs/NNS",
        "high/JJ energy/NN prices/NNS", "climate/NN policy/NN", "a/DT data/NN breach/NN",
        "labour/NN shortages/NNS", "supply/NN problems/NNS", "the/DT budget/NN deficit/NN",
        "housing/NN costs/NNS", "weak/JJ demand/NN", "a/DT pension/NN reform/NN",
        "safety/NN concerns/NNS", "unpaid/JJ wages/NNS",
    ],
    "GOODS": [
        "trains/NNS", "wind/NN turbines/NNS", "medical/JJ equipment/NN", "solar/JJ panels/NNS",
        "fighter/NN jets/NNS", "school/NN laptops/NNS", "electric/JJ buses/NNS",
    ],
    "GADGET": [
        "smartphone/NN", "laptop/NN", "tablet/NN", "headset/NN", "smartwatch/NN", "drone/NN",
        "robot/NN", "chip/NN", "camera/NN", "speaker/NN", "router/NN",
    ],
    "TECH_ADJ": [
        "foldable/JJ", "cheaper/JJR", "lighter/JJR", "waterproof/JJ", "compact/JJ", "wireless/JJ",
        "powerful/JJ",
    ],
    "TECH_VP": [
        "translates/VBZ speech/NN in/IN real/JJ time/NN",
        "runs/VBZ for/IN {NUM_SMALL} days/NNS on/IN one/CD charge/NN",
        "detects/VBZ crop/NN diseases/NNS",
        "sorts/VBZ parcels/NNS without/IN human/JJ help/NN",
        "predicts/VBZ traffic/NN jams/NNS",
    ],
    "TECH_FIELD": [
        "artificial/JJ intelligence/NN", "robotics/NNS", "battery/NN", "quantum/JJ computing/NN",
        "cybersecurity/NN", "satellite/NN", "cloud/NN", "biotech/NN",
    ],
    "POSITION": ["striker/NN", "midfielder/NN", "goalkeeper/NN", "defender/NN", "winger/NN"],
    "COMPETITION": ["cup/NN", "league/NN", "continental/JJ", "championship/NN"],
    "RACE": [
        "marathon/NN", "time/NN trial/NN", "100/CD metres/NNS", "grand/JJ prix/NN",
        "opening/VBG stage/NN",
    ],
    "INJURY": ["knee/NN", "hamstring/NN", "shoulder/NN", "ankle/NN", "back/NN"],
    "DISASTER": ["storm/NN", "flood/NN", "earthquake/NN", "heatwave/NN", "wildfire/NN"],
}

ENTITY_SLOTS = {
    "PER": "PER", "PER_SHORT": "PER", "COMPANY": "ORG", "CENTRAL_BANK": "ORG",
    "REGULATOR": "ORG", "AGENCY": "ORG", "CLUB": "ORG", "CITY": "LOC", "COUNTRY": "LOC",
    "REGION": "LOC", "D_DAY": "DATE", "D_MONTHISH": "DATE", "D_REL": "DATE", "D_REL_FUT": "DATE",
    "D_QUARTER": "DATE", "D_YEAR": "DATE", "MONEY": "MONEY", "PRICE": "MONEY",
}

Token = tuple[str, str, str]  # (word, tag, label)


def parse_phrase(text: str, default_tag: str = "NNP") -> list[tuple[str, str]]:
    """``"Rio de/IN Janeiro"`` -> ``[("Rio", "NNP"), ("de", "IN"), ("Janeiro", "NNP")]``."""
    out = []
    for item in text.split():
        word, sep, tag = item.rpartition("/")
        out.append((word, tag) if sep and word else (item, default_tag))
    return out


ONCE_PER_SENTENCE = {"WHEN": "WHEN", "WHEN_FUT": "WHEN", "SAYS": "SAYS"}


class Generator:
    """Expands the grammar with one seeded random number generator."""

    def __init__(self, seed: int = SEED):
        self.rng = random.Random(seed)
        self.used: set[object] = set()  # once-per-sentence symbols and EXT alternatives

    # -- entity fillers -----------------------------------------------------------------------
    def entity_words(self, slot: str) -> list[tuple[str, str]]:
        r = self.rng
        if slot == "PER":
            return [(r.choice(FIRST_NAMES), "NNP"), (r.choice(LAST_NAMES), "NNP")]
        if slot == "PER_SHORT":
            return [(r.choice(LAST_NAMES), "NNP")]
        if slot == "COMPANY":
            words = [(r.choice(ORG_STEMS), "NNP")]
            if r.random() < 0.8:
                words.append((r.choice(ORG_KINDS), "NNP"))
            if r.random() < 0.35:
                words.append((r.choice(ORG_DESIGNATORS), "NNP"))
            return words
        lists = {"CENTRAL_BANK": CENTRAL_BANKS, "REGULATOR": REGULATORS, "AGENCY": AGENCIES,
                 "CITY": CITIES, "COUNTRY": COUNTRIES, "REGION": REGIONS,
                 "D_REL": RELATIVE_DATES, "D_REL_FUT": FUTURE_DATES, "D_QUARTER": QUARTERS}
        if slot in lists:
            return parse_phrase(r.choice(lists[slot]))
        if slot == "CLUB":
            return [(r.choice(CLUB_TOWNS), "NNP"), (r.choice(CLUB_KINDS), "NNP")]
        if slot == "D_DAY":
            if r.random() < 0.5:
                return [(r.choice(WEEKDAYS), "NNP")]
            return [(r.choice(MONTHS), "NNP"), (str(r.randint(1, 28)), "CD")]
        if slot == "D_MONTHISH":
            kind = r.randrange(3)
            if kind == 0:
                return [(r.choice(MONTHS), "NNP")]
            if kind == 1:
                return [(r.choice(MONTHS), "NNP"), (str(r.randint(2015, 2025)), "CD")]
            return [("early", "JJ"), (r.choice(MONTHS), "NNP")]
        if slot == "D_YEAR":
            return [(str(r.randint(1998, 2025)), "CD")]
        if slot == "MONEY":
            return self.money()
        if slot == "PRICE":
            return self.price()
        raise KeyError(slot)

    def money(self) -> list[tuple[str, str]]:
        """A large amount: deals, fines, results, investments."""
        r = self.rng
        kind = r.randrange(4)
        scale = r.choice(["million", "million", "billion"])
        if kind == 0:  # $ 4.2 million
            return [(r.choice(SYMBOLS), "SYM"), (self.amount(), "CD"), (scale, "CD")]
        if kind == 1:  # 12 million euros
            word, tag = r.choice(CURRENCIES)
            return [(self.amount(), "CD"), (scale, "CD"), (word, tag)]
        if kind == 2:  # $ 950,000
            return [(r.choice(SYMBOLS), "SYM"), (f"{r.randint(100, 999) * 1000:,}", "CD")]
        return [(self.amount(), "CD"), (scale, "CD"), ("dollars", "NNS")]

    def price(self) -> list[tuple[str, str]]:
        """A consumer price: $ 499, 899 euros."""
        r = self.rng
        value = f"{r.randint(1, 19) * 100 - 1}" if r.random() < 0.7 else f"{r.randint(20, 1500)}"
        if r.random() < 0.6:
            return [(r.choice(SYMBOLS), "SYM"), (value, "CD")]
        word, tag = r.choice(CURRENCIES[:3])
        return [(value, "CD"), (word, tag)]

    def amount(self) -> str:
        r = self.rng
        if r.random() < 0.5:
            return str(r.randint(2, 900))
        return f"{r.randint(1, 99)}.{r.randint(1, 9)}"

    # -- other fillers ------------------------------------------------------------------------
    def special(self, slot: str) -> list[tuple[str, str]] | None:
        r = self.rng
        if slot == "PCT":
            if r.random() < 0.6:
                value = str(r.randint(1, 45))
            else:
                value = f"{r.randint(0, 19)}.{r.randint(1, 9)}"
            return [(value, "CD"), ("percent", "NN")]
        if slot == "NUM":
            if r.random() < 0.5:
                value = str(r.randint(12, 950))
            else:
                value = f"{r.randint(1, 60) * 1000 + r.randint(0, 9) * 100:,}"
            return [(value, "CD")]
        if slot == "NUM_SMALL":
            return [(str(r.randint(2, 30)), "CD")]
        if slot == "SCORE":
            return [(f"{r.randint(0, 5)}-{r.randint(0, 4)}", "CD")]
        if slot == "PRODUCT":
            words = [(r.choice(PRODUCT_NAMES), "NNP")]
            if r.random() < 0.7:
                model = r.choice(PRODUCT_MODELS)
                words.append((model, "CD" if model.isdigit() else "NNP"))
            return words
        return None

    # -- expansion ----------------------------------------------------------------------------
    def expand(self, symbol: str) -> list[Token]:
        if symbol in ONCE_PER_SENTENCE:
            if ONCE_PER_SENTENCE[symbol] in self.used:
                return []
            self.used.add(ONCE_PER_SENTENCE[symbol])
        if symbol in ENTITY_SLOTS:
            return self.entity(symbol)
        words = self.special(symbol)
        if words is not None:
            return [(w, t, "O") for w, t in words]
        alternatives = GRAMMAR[symbol]
        if symbol == "EXT":  # no modifier twice in one sentence
            fresh = [i for i in range(len(alternatives)) if ("EXT", i) not in self.used]
            if not fresh:
                return []
            index = self.rng.choice(fresh)
            self.used.add(("EXT", index))
        else:
            index = self.rng.randrange(len(alternatives))
        out: list[Token] = []
        for item in alternatives[index].split():
            if item.startswith("{") and item.endswith("}"):
                out.extend(self.expand(item[1:-1]))
            else:
                word, _, tag = item.rpartition("/")
                out.append((word, tag, "O"))
        return out

    def entity(self, slot: str) -> list[Token]:
        etype = ENTITY_SLOTS[slot]
        words = self.entity_words(slot)
        out = [(w, t, ("B-" if i == 0 else "I-") + etype) for i, (w, t) in enumerate(words)]
        if slot == "MONEY" and "PAREN" not in self.used and self.rng.random() < 0.12:
            self.used.add("PAREN")  # "( about $ 3.1 million )" after an amount
            other = [(w, t, ("B-" if i == 0 else "I-") + etype)
                     for i, (w, t) in enumerate(self.money())]
            out += [("(", "PUNCT", "O"), ("about", "RB", "O"), *other, (")", "PUNCT", "O")]
        return out

    def candidate(self) -> list[Token]:
        self.used = set()
        return tidy(self.expand("S"))

    def sentence(self) -> list[Token]:
        """A sentence whose length is close to a target drawn uniformly from 5..40."""
        target = self.rng.randint(MIN_LEN, MAX_LEN)
        best: list[Token] | None = None
        tries = 0
        while best is None or (tries < 25 and abs(len(best) - target) > 1):
            tries += 1
            sent = self.candidate()
            if not MIN_LEN <= len(sent) <= MAX_LEN:
                continue
            if best is None or abs(len(sent) - target) < abs(len(best) - target):
                best = sent
        return best


VOWEL_SOUND = re.compile(r"^(?:[aeioAEIO]|un[a-z]|8|1[18](?:\D|$))")
CONSONANT_SOUND = {"EUR", "European", "one"}


def starts_with_vowel_sound(word: str) -> bool:
    return word not in CONSONANT_SOUND and bool(VOWEL_SOUND.match(word))


def tidy(tokens: list[Token]) -> list[Token]:
    """Fix a/an, capitalise the first word."""
    out = list(tokens)
    for i in range(len(out) - 1):
        word, tag, label = out[i]
        if word.lower() in ("a", "an") and tag == "DT":
            out[i] = ("an" if starts_with_vowel_sound(out[i + 1][0]) else "a", tag, label)
    for i, (word, tag, label) in enumerate(out):
        if word[0].isalpha():
            out[i] = (word[0].upper() + word[1:], tag, label)
            break
        if tag != "PUNCT":
            break
    return out


def make_corpus(
    seed: int = SEED, n: int = N_SENTENCES
) -> tuple[list[list[Token]], list[list[str]]]:
    """Return the gold sentences and, per sentence, the labels the annotation project shows."""
    gen = Generator(seed)
    seen: set[tuple[str, ...]] = set()
    gold: list[list[Token]] = []
    while len(gold) < n:
        sent = gen.sentence()
        key = tuple(w for w, _, _ in sent)
        if key not in seen:
            seen.add(key)
            gold.append(sent)

    n_full = round(FULL_FRACTION * n)
    n_partial = round(PARTIAL_FRACTION * n)
    shown: list[list[str]] = []
    for idx, sent in enumerate(gold):
        labels = [label for _, _, label in sent]
        if idx < n_full:
            shown.append(labels)
        elif idx < n_full + n_partial:
            length = len(labels)
            lo, hi = math.ceil(HIDE_MIN * length), math.floor(HIDE_MAX * length)
            k = min(max(round(gen.rng.uniform(HIDE_MIN, HIDE_MAX) * length), lo), hi)
            hidden = set(gen.rng.sample(range(length), k))
            shown.append([MISSING if i in hidden else lab for i, lab in enumerate(labels)])
        else:
            shown.append([MISSING] * len(labels))
    return gold, shown


def render(gold: list[list[Token]], labels: list[list[str]] | None = None) -> str:
    lines = []
    for s, sent in enumerate(gold):
        for t, (word, tag, label) in enumerate(sent):
            lines.append(f"{word} {tag} {label if labels is None else labels[s][t]}")
        lines.append("")
    return "\n".join(lines) + "\n"


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    gold, shown = make_corpus()
    files = {
        "sample_gold.conll": render(gold),
        "sample.conll": render(gold, shown),
        "template": TEMPLATE,
    }
    paths = []
    for name, text in files.items():
        path = out_dir / name
        path.write_bytes(text.encode("ascii"))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="output directory (default: the directory of this script)")
    args = parser.parse_args(argv)
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
