"""The synthetic DBPM stream's vocabulary (:mod:`streams.testing.dbpm_stream`): data tables only.

Clinical terms and their modifiers per NER category, how often a patient's NER output covers each
category and how many entities it contributes, the non-entities the verifier rejects, the relation
labels the public DBPM ontology admits, the paper's six ontology-violating type-triples (§6.2), the open
vocabulary of rejected relation labels, and the answers of failing QA pairs. The terms are our own.
"""

from __future__ import annotations

TERMS: dict[str, tuple[str, ...]] = {
    "Diagnosis": (
        "community-acquired pneumonia",
        "septic shock",
        "pulmonary embolism",
        "acute kidney injury",
        "heart failure",
        "hypothyroidism",
        "sarcoidosis",
        "lupus nephritis",
        "infective endocarditis",
        "pancreatitis",
        "appendicitis",
        "cholangitis",
        "bacterial meningitis",
        "ischemic stroke",
        "myocarditis",
        "cirrhosis",
        "diffuse large b-cell lymphoma",
        "cutaneous melanoma",
        "miliary tuberculosis",
        "takotsubo cardiomyopathy",
        "guillain-barre syndrome",
        "aortic dissection",
    ),
    "Symptoms": (
        "dyspnea",
        "pleuritic chest pain",
        "hemoptysis",
        "vomiting",
        "watery diarrhea",
        "syncope",
        "palpitations",
        "weight loss",
        "night sweats",
        "abdominal pain",
        "jaundice",
        "pruritus",
        "arthralgia",
        "myalgia",
        "confusion",
        "seizures",
        "fatigue",
        "ankle edema",
        "dry cough",
        "fever",
    ),
    "Tests": (
        "ct angiography",
        "lumbar puncture",
        "blood cultures",
        "d-dimer",
        "serum ferritin",
        "c-reactive protein",
        "procalcitonin",
        "transthoracic echocardiogram",
        "mri of the brain",
        "chest radiograph",
        "liver biopsy",
        "urinalysis",
        "serum lactate",
        "bone marrow aspirate",
        "electrocardiogram",
    ),
    "Treatment": (
        "piperacillin-tazobactam",
        "vancomycin",
        "dexamethasone",
        "rituximab",
        "enoxaparin",
        "furosemide",
        "insulin glargine",
        "levothyroxine",
        "laparoscopic cholecystectomy",
        "hemodialysis",
        "mechanical ventilation",
        "ceftriaxone",
        "acyclovir",
        "prednisolone",
        "amiodarone",
    ),
    "History": (
        "prior myocardial infarction",
        "childhood asthma",
        "previous splenectomy",
        "renal transplant",
        "hepatitis c infection",
        "treated breast cancer",
        "gestational diabetes",
        "atrial fibrillation",
    ),
    "Risk_Factor": (
        "tobacco smoking",
        "obesity",
        "heavy alcohol use",
        "injection drug use",
        "hypertension",
        "family history of colon cancer",
        "immunosuppression",
        "sedentary lifestyle",
    ),
    "Observation": (
        "hepatomegaly",
        "splenomegaly",
        "bibasal crackles",
        "systolic murmur",
        "petechiae",
        "cervical lymphadenopathy",
        "ascites",
    ),
    "Outcome_ClinicalStatus": ("full recovery", "persistent neurological deficit", "complete remission"),
    "Outcome_Disposition": ("discharged home", "transferred to rehabilitation", "admitted to intensive care"),
}

MODIFIERS: dict[str, tuple[str, ...]] = {
    "Diagnosis": ("acute", "chronic", "severe", "recurrent", "suspected", "complicated"),
    "Symptoms": ("progressive", "intermittent", "severe", "mild", "new-onset", "nocturnal"),
    "Observation": ("marked", "mild", "bilateral", "tender"),
}

# Probability that a patient's NER output covers each category (the paper's saturated, mid and
# sparse coverage regimes of Table 8).
COVERAGE: dict[str, float] = {
    "Diagnosis": 0.96,
    "Symptoms": 0.97,
    "Tests": 0.95,
    "Treatment": 0.97,
    "History": 0.45,
    "Risk_Factor": 0.5,
    "Observation": 0.1,
    "Outcome_ClinicalStatus": 0.05,
    "Outcome_Disposition": 0.03,
}

POOL_SIZE: dict[str, tuple[int, int]] = {
    "Diagnosis": (2, 4),
    "Symptoms": (4, 8),
    "Tests": (4, 9),
    "Treatment": (3, 7),
    "History": (1, 3),
    "Risk_Factor": (1, 3),
    "Observation": (1, 3),
    "Outcome_ClinicalStatus": (1, 1),
    "Outcome_Disposition": (1, 1),
}
"""Distinct entities a covered category contributes to a patient (NER candidates draw from them)."""

JUNK_ENTITIES = (
    "patient",
    "the patient",
    "unknown",
    "none",
    "normal",
    "history",
    "today",
    "left",
    "mg",
    "workup",
)
"""Non-entities an extractor emits and the verifier rejects: the concentrated NER fail stream."""

JUNK_WEIGHTS = tuple(1.0 / (rank + 1) for rank in range(len(JUNK_ENTITIES)))

ADMISSIBLE: dict[tuple[str, str], tuple[str, ...]] = {
    ("Treatment", "Diagnosis"): ("TREATS", "PREVENTS"),
    ("Treatment", "Symptoms"): ("TREATS", "ALLEVIATES"),
    ("Tests", "Diagnosis"): ("REVEALS", "CONFIRMS", "RULES_OUT"),
    ("Symptoms", "Diagnosis"): ("INDICATES", "SUGGESTS"),
    ("Risk_Factor", "Diagnosis"): ("INCREASES_RISK_OF",),
    ("History", "Diagnosis"): ("HISTORY_OF", "PRECEDES"),
    ("Diagnosis", "Diagnosis"): ("COMPLICATED_BY", "CAUSES"),
    ("Treatment", "Tests"): ("GUIDED_BY", "NECESSITATES"),
}
"""Type pairs and relation labels the public DBPM ontology admits (accepted relations use these)."""

VIOLATIONS: tuple[tuple[str, str, str], ...] = (
    ("Tests", "ASSOCIATED_WITH", "Diagnosis"),
    ("Symptoms", "MANIFESTS", "Diagnosis"),
    ("Symptoms", "CAUSES", "Diagnosis"),
    ("Treatment", "PREVENTS", "Symptoms"),
    ("History", "ASSOCIATED_WITH", "Diagnosis"),
    ("Diagnosis", "ASSOCIATED_WITH", "History"),
)
"""The six ontology-violating type-triples of §6.2, most frequent first."""

VIOLATION_WEIGHTS = (0.3, 0.22, 0.18, 0.12, 0.1, 0.08)

LABEL_STEMS = (
    "TREATS",
    "CAUSES",
    "REVEALS",
    "INDICATES",
    "PRECEDES",
    "FOLLOWS",
    "COMPLICATES",
    "MIMICS",
    "TRIGGERS",
    "RESOLVES",
    "MONITORED",
    "EVALUATED",
    "DETECTED",
    "ATTRIBUTED",
    "RESPONDS",
    "REQUIRES",
    "PROMPTED",
    "SUPPORTS",
    "EXCLUDES",
    "DIFFERENTIAL",
    "SECONDARY",
    "CO_OCCURS",
    "WORSENED",
    "IMPROVED",
    "ADMINISTERED",
    "DISCONTINUED",
    "SHOWS",
    "CONSISTENT",
    "ASSOCIATED",
    "LINKED",
)
LABEL_PREFIXES = ("", "", "MAY_", "LIKELY_", "POSSIBLY_", "NOT_", "WAS_", "IS_", "SUBSEQUENTLY_", "PARTLY_")
LABEL_SUFFIXES = ("", "_WITH", "_FOR", "_DURING", "_IN", "_BY", "_AFTER", "_TO", "#")


ABSTENTION = "not documented in the narrative"
HALLUCINATIONS = (
    "tumour lysis syndrome",
    "anaphylaxis to penicillin",
    "hyperkalaemia",
    "stevens-johnson syndrome",
    "death from multiorgan failure",
    "clostridioides difficile colitis",
)
