"""The prompts of the self-distillation data: a catalogue written for this project, none from Spec-Bench.

Three kinds, built in stages by `distill_run`:
    catalogue   task templates x topics, plus generated math problems, coding tasks, translations, role-play
                scenes and small reasoning puzzles (pure functions of a seed);
    self-made   questions the model writes itself: "write five questions about {topic}", parsed, and the
                well-formed ones kept (`parse_questions`);
    second turn a follow-up on the model's own first answer (multi-turn), or a task on that answer as a
                document (summarise it, extract from it, answer from it).
Spec-Bench is the measurement set: `SpecBenchFilter` drops any prompt that repeats one of its turns or
shares a run of eight words with one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

TOPICS = (
    # the first 60 are those of the first, 192-sample data set
    "photosynthesis", "volcanoes", "the stock market", "machine learning", "bread baking", "chess",
    "the water cycle", "electric cars", "honeybees", "the Roman Empire", "black holes", "recycling",
    "sourdough starters", "sorting algorithms", "the human heart", "jazz music", "gardening",
    "solar panels", "the French Revolution", "marathon training", "coral reefs", "cryptography",
    "public libraries", "coffee", "earthquakes", "the internet", "vaccines", "origami", "rainforests",
    "prime numbers", "bicycles", "the moon landing", "meditation", "sharks", "climate change",
    "spreadsheets", "the printing press", "tea ceremonies", "wind turbines", "dinosaurs", "budgeting",
    "linked lists", "the immune system", "mountain climbing", "renewable energy", "the Silk Road",
    "octopuses", "compound interest", "video games", "glaciers", "recursion", "penguins", "democracy",
    "3D printing", "sleep", "the periodic table", "ancient Egypt", "rainbows", "SQL databases", "kites",
    # science and nature
    "plate tectonics", "the speed of light", "DNA", "evolution", "the solar system", "magnetism",
    "static electricity", "fungi", "bird migration", "tides", "the ozone layer", "antibiotics",
    "the human brain", "bacteria", "tornadoes", "deserts", "wetlands", "bats", "elephants", "ants",
    "the greenhouse effect", "nuclear energy", "gravity", "sound waves", "fossils", "comets", "Mars",
    "the Arctic", "whales", "forest fires", "soil", "hurricanes", "the microscope", "batteries",
    # technology and computing
    "binary numbers", "hash tables", "operating systems", "cloud computing", "passwords", "email",
    "smartphones", "GPS", "robots", "open source software", "computer viruses", "web browsers",
    "version control with git", "unit testing", "regular expressions", "APIs", "databases", "compilers",
    "neural networks", "search engines", "data privacy", "spreadsheet formulas", "the transistor",
    "satellites", "self-driving cars", "virtual reality", "Wi-Fi", "QR codes",
    # history and society
    "the Industrial Revolution", "the Renaissance", "ancient Greece", "the Vikings", "the Cold War",
    "the Great Wall of China", "the invention of writing", "the Olympic Games", "the printing of money",
    "the history of medicine", "castles", "the Aztecs", "the Ottoman Empire", "the steam engine",
    "voting", "the United Nations", "human rights", "urban planning", "public transport", "trade",
    "the history of the bicycle", "lighthouses", "the postal service", "museums", "maps",
    # daily life and work
    "cooking pasta", "time management", "learning a new language", "job interviews", "saving money",
    "moving to a new city", "first aid", "houseplants", "camping", "writing a resume", "public speaking",
    "remote work", "healthy breakfasts", "running a small business", "customer service", "teamwork",
    "decluttering a home", "caring for a dog", "raising chickens", "composting", "road trips",
    "negotiating a salary", "studying for exams", "volunteering", "planning a wedding", "home repairs",
    # arts, culture and leisure
    "impressionist painting", "the violin", "photography", "poetry", "film making", "theater",
    "comic books", "ballet", "pottery", "knitting", "board games", "folk tales", "architecture",
    "street art", "classical music", "podcasts", "the novel", "calligraphy", "dance", "magic tricks",
    # health, food and sport
    "nutrition", "vitamins", "yoga", "swimming", "football", "tennis", "cycling races", "the Tour de France",
    "spices", "chocolate", "cheese making", "fermentation", "olive oil", "rice", "tea", "hydration",
    "stretching", "the common cold", "allergies", "posture",
    # economics and ideas
    "inflation", "supply and demand", "taxes", "insurance", "credit cards", "startups", "advertising",
    "game theory", "probability", "statistics", "logic", "ethics", "philosophy of mind", "happiness",
    "habits", "creativity", "critical thinking", "memory", "motivation", "curiosity",
)

TASKS = (
    # the first 16 are those of the first data set
    "Explain {topic} to a curious twelve-year-old.",
    "Write a short poem about {topic}.",
    "List five interesting facts about {topic}.",
    "What are the main advantages and disadvantages of {topic}?",
    "Write a Python function related to {topic}, with a docstring and a usage example.",
    "Summarize the history of {topic} in one paragraph.",
    "Give me three practical tips for someone getting started with {topic}.",
    "Write a short story in which {topic} plays an important role.",
    "What are common misconceptions about {topic}?",
    "Compare {topic} with something similar and explain the differences.",
    "Write an email to a friend recommending they learn about {topic}.",
    "Describe a typical day for a person who works with {topic}.",
    "Create a quiz with four questions about {topic} and give the answers.",
    "Explain step by step how {topic} works.",
    "Why does {topic} matter for the future?",
    "Write a product description for a gadget inspired by {topic}.",
    # more forms: definitions, argument, structure, style, audience
    "What is {topic}? Answer in two or three sentences.",
    "Write a haiku about {topic}.",
    "Write a limerick about {topic}.",
    "Give a one-sentence definition of {topic}, then explain it in more detail.",
    "Write a persuasive paragraph arguing that everyone should know about {topic}.",
    "Write a dialogue between a teacher and a student about {topic}.",
    "Explain {topic} using an analogy from everyday life.",
    "What questions would an expert ask about {topic}?",
    "Outline a five-part lesson plan on {topic}.",
    "Write a news headline and a short article about a discovery related to {topic}.",
    "Describe {topic} in exactly five bullet points.",
    "What careers are connected to {topic}?",
    "Write a tweet-length summary of {topic}.",
    "How has {topic} changed over the last hundred years?",
    "Explain {topic} to someone who is an expert in cooking but knows nothing about it.",
    "What would the world look like without {topic}?",
    "Write a short speech about {topic} for a school assembly.",
    "Give a beginner's glossary of five terms related to {topic}.",
    "What are the ethical questions raised by {topic}?",
    "Write a diary entry from someone discovering {topic} for the first time.",
    "Describe three experiments or activities that teach {topic}.",
    "How would you explain {topic} to your grandparents?",
    "Write a table comparing three aspects of {topic}, using Markdown.",
    "What are the biggest open problems or debates about {topic}?",
    "Write a riddle whose answer is {topic}, then explain the answer.",
    "Give a pros and cons list for studying {topic} at university.",
    "Write a short motivational message for someone who struggles with {topic}.",
    "Explain the key numbers or facts everyone should remember about {topic}.",
)

QUESTION_WRITING = (
    "Write five different questions that a curious student might ask about {topic}. "
    "Number them 1 to 5, one question per line.",
    "List five practical how-to questions about {topic}, numbered 1 to 5, one per line.",
    "Write five questions about {topic} that need a careful, detailed answer. Number them 1 to 5.",
)

CODE_TASKS = (
    "reverses a string", "checks whether a word is a palindrome", "counts the vowels in a sentence",
    "returns the n-th Fibonacci number", "finds the largest number in a list", "removes duplicates from a list",
    "merges two sorted lists", "computes the factorial of a number", "checks whether a number is prime",
    "converts Celsius to Fahrenheit", "counts how often each word appears in a text", "flattens a nested list",
    "computes the average of a list of numbers", "returns the second largest number in a list",
    "checks whether two strings are anagrams", "capitalizes the first letter of every word",
    "finds the greatest common divisor of two numbers", "validates a simple email address",
    "splits a list into chunks of a given size", "rotates a list by k positions", "computes a running total",
    "converts a Roman numeral to an integer", "returns all even numbers from a list",
    "reads a CSV file and prints each row", "implements binary search", "sorts a list of dictionaries by a key",
    "counts the lines in a text file", "generates a random password", "checks whether brackets are balanced",
    "computes the distance between two points", "transposes a matrix", "finds the most common element",
    "converts a number to binary", "removes punctuation from a string", "implements a simple stack class",
    "implements a queue with two stacks", "returns the intersection of two lists", "computes compound interest",
    "checks whether a year is a leap year", "formats seconds as hours, minutes and seconds",
)

CODE_FORMS = (
    "Write a Python function that {task}.",
    "Write a JavaScript function that {task}, and explain how it works.",
    "Show how to write a function that {task} in Python, with two test cases.",
    "Explain an efficient algorithm that {task}, then give the code in Python.",
)

SENTENCES = (
    "The library opens at nine o'clock every morning.", "My brother is learning to play the guitar.",
    "We went to the beach last summer and swam every day.", "Please close the window when it starts to rain.",
    "The train to the airport leaves in twenty minutes.", "She bought fresh vegetables at the market.",
    "This restaurant serves the best soup in town.", "The children are playing football in the park.",
    "I would like a cup of tea with milk, please.", "The meeting has been moved to Thursday afternoon.",
    "Our neighbours have a very friendly dog.", "It is important to drink enough water every day.",
    "The museum is closed on Mondays.", "He forgot his umbrella at the office.",
    "The mountains are covered with snow in winter.", "Could you tell me where the nearest pharmacy is?",
    "The new bridge will be finished next year.", "My favourite season is autumn because of the colours.",
    "The students read the book before the exam.", "We need to buy bread, eggs and cheese.",
    "The concert was cancelled because of the storm.", "I have lived in this city for ten years.",
    "The cat is sleeping on the sofa.", "Thank you very much for your help yesterday.",
    "The shop around the corner sells old books.", "They are planning a trip to the mountains.",
)

LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese", "Dutch")

ROLES = (
    "a pirate captain", "a medieval knight", "a tour guide in an old city", "a detective", "a famous chef",
    "a grumpy cat", "the commander of a space station", "a friendly robot", "a wise old wizard",
    "a museum curator", "a park ranger", "a sports coach", "a time traveller from the year 2300",
    "a librarian", "a lighthouse keeper", "a travelling musician", "a farmer", "a marine biologist",
    "a fashion designer", "a game show host", "a ship's doctor", "a beekeeper",
)

ROLE_SCENES = (
    "Pretend you are {role}. Describe your typical morning.",
    "You are {role}. Greet a group of visitors and tell them what to expect today.",
    "Act as {role} and give advice to someone who feels nervous before a big day.",
    "Stay in character as {role} and explain the best and worst parts of your job.",
    "As {role}, write a short letter to your younger self.",
    "Imagine you are {role}. Tell a short story about the strangest thing that ever happened to you.",
)

FOLLOW_UPS = (
    "Can you explain the main point of your answer in simpler words?",
    "Summarize your previous answer in two sentences.",
    "Give a concrete example of something you mentioned.",
    "What is one thing in your answer that someone might disagree with, and why?",
    "Turn your answer into a short list of key points.",
    "Explain your answer again as if I were five years old.",
    "Which part of your answer is the most important, and why?",
    "Write three quiz questions based on your answer, with their answers.",
    "Give your answer a title and explain why it fits.",
    "Is there anything in your answer you would correct or add?",
    "Make your answer more formal, as if for a report.",
    "What should I read or learn next after your answer?",
    "Can you go into more detail on the first point you made?",
    "How would you say the same thing in half the words?",
)

DOCUMENT_TASKS = (
    "Summarize the following text in two sentences.\n\n{text}",
    "Read the text below and list its three most important ideas.\n\n{text}",
    "Extract every noun phrase that names a thing or a concept in this text, as a JSON list.\n\n{text}",
    "Here is a text:\n\n{text}\n\nWrite one question that the text answers, then answer it using only the text.",
    "Give the following text a short, catchy title and a one-line summary.\n\n{text}",
    "Rewrite this text for a young reader, keeping all the facts.\n\n{text}",
    "What is the tone of the following text, and which words show it?\n\n{text}",
)


FIRST_TASKS, FIRST_TOPICS = 16, 60  # the first data set's catalogue: TASKS[:16] x TOPICS[:60]


def prompt_set(count: int) -> list[str]:
    """`count` distinct prompts of the first catalogue (the QDQ recipe's calibration prompts): a topic-major walk
    over its tasks x topics with a stride, so neighbours differ."""
    tasks, topics = TASKS[:FIRST_TASKS], TOPICS[:FIRST_TOPICS]
    total = len(tasks) * len(topics)
    if not 1 <= count <= total:
        raise ValueError(f"prompt count must be between 1 and {total}, got {count}")
    stride = 7  # coprime with len(tasks) = 16: consecutive prompts use different task templates
    return [tasks[(i // len(topics) + stride * i) % len(tasks)].format(topic=topics[i % len(topics)])
            for i in range(count)]


def _numbered_walk(templates: tuple[str, ...], fills: tuple[str, ...], key: str, count: int,
                   seed: int | None = None, family: str = "") -> list[str]:
    """`count` distinct template x fill prompts of a walk over all of them: round r gives every fill one template,
    fill f's template being (7 f + r) mod T, so neighbours differ and no fill meets the same template twice within
    T rounds. seed None: the walk's first `count`; a seed: `count` of the whole walk drawn by it (a stream of its own
    per `family`), in walk order, so that plans of other seeds ask mostly other prompts."""
    total = len(templates) * len(fills)
    if count > total:
        raise ValueError(f"only {total} {key} prompts exist, {count} were asked for")
    if seed is None:
        picked = range(count)
    else:
        picked = np.sort(_pick(seed, family or key).choice(total, size=count, replace=False))
    out = []
    for i in picked:
        round_, f = divmod(int(i), len(fills))
        out.append(templates[(7 * f + round_) % len(templates)].format(**{key: fills[f]}))
    return out


def _pick(seed: int, salt: str) -> np.random.Generator:
    """The generator that picks a seed's subset of one prompt family (each family its own stream)."""
    return np.random.default_rng([seed, *salt.encode()])


def topic_prompts(count: int, seed: int | None = None) -> list[str]:
    return _numbered_walk(TASKS, TOPICS, "topic", count, seed)


def question_writing_prompts(count: int, seed: int | None = None) -> list[str]:
    return _numbered_walk(QUESTION_WRITING, TOPICS, "topic", count, seed, family="question writing")


def code_prompts(count: int, seed: int | None = None) -> list[str]:
    return _numbered_walk(CODE_FORMS, CODE_TASKS, "task", count, seed)


def role_prompts(count: int, seed: int | None = None) -> list[str]:
    return _numbered_walk(ROLE_SCENES, ROLES, "role", count, seed)


def translation_prompts(count: int, seed: int | None = None) -> list[str]:
    """`count` of the sentence x language pairs: a fixed shuffle's first `count`, or a seed's draw of them."""
    pairs = [f"Translate into {lang}: \"{s}\"" for s in SENTENCES for lang in LANGUAGES]
    if count > len(pairs):
        raise ValueError(f"only {len(pairs)} translation prompts exist, {count} were asked for")
    rng = np.random.default_rng(11) if seed is None else _pick(seed, "translation")
    return [pairs[i] for i in rng.permutation(len(pairs))[:count]]


def _distinct(draw: Callable[[], str], count: int) -> list[str]:
    """The first `count` distinct prompts that `draw` (a seeded generator) gives, in the order drawn."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        prompt = draw()
        if prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    return out


def math_prompts(count: int, seed: int = 0) -> list[str]:
    """Word problems with seeded random numbers (distinct)."""
    rng = np.random.default_rng([seed, 1])
    names = ("Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas")

    def one() -> str:
        a, b, c = (int(x) for x in rng.integers(2, 60, size=3))
        name = names[int(rng.integers(len(names)))]
        forms = (
            f"{name} has {a + b} marbles, gives {b} to a friend and then wins {c} more. How many marbles does "
            f"{name} have now? Explain your reasoning.",
            f"A baker makes {a} loaves of bread a day. How many loaves does the baker make in {b % 9 + 2} weeks?",
            f"A train travels at {a + 40} km per hour for {b % 7 + 1} hours. How far does it go?",
            f"What is {5 * (a % 19 + 1)}% of {10 * c}? Show the calculation.",
            f"Solve for x: {a % 9 + 2}x + {b} = {(a % 9 + 2) * c + b}.",
            f"A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter?",
            f"A jacket costs ${10 * c} and is on sale for {5 * (a % 10 + 1)}% off. What is the sale price?",
            f"The average of three numbers is {a + 10}. Two of them are {b} and {c}. What is the third number?",
            f"A recipe needs {a % 5 + 2} cups of flour for {12 * (b % 4 + 1)} cookies. How much flour is needed "
            f"for {12 * (c % 6 + 1)} cookies?",
            f"What is the sum of all whole numbers from 1 to {a + c}? Explain a quick way to compute it.",
            f"Is {int(rng.integers(20, 400))} a prime number? Explain how you checked.",
            f"{name} saves ${a} every week. How many weeks until {name} has saved at least ${a * b + c}?",
            f"A tank holds {10 * a} litres and drains at {b % 9 + 1} litres per minute. How long until it is "
            "empty?",
            f"Two friends split a bill of ${a + b + c}.{c % 10}0 equally. How much does each pay?",
        )
        return forms[int(rng.integers(len(forms)))]

    return _distinct(one, count)


def puzzle_prompts(count: int, seed: int = 0) -> list[str]:
    """Small logic and pattern puzzles with seeded names and numbers (distinct)."""
    rng = np.random.default_rng([seed, 2])
    names = ("Alice", "Bruno", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Julia")
    groups = ("cats", "doctors", "birds", "students", "musicians", "teachers", "runners", "painters")
    traits = ("happy", "tall", "curious", "fast", "quiet", "kind", "clever", "busy")

    def one() -> str:
        x, y, z = (names[i] for i in rng.choice(len(names), size=3, replace=False))
        g1, g2 = (groups[i] for i in rng.choice(len(groups), size=2, replace=False))
        t = traits[int(rng.integers(len(traits)))]
        start, step = int(rng.integers(1, 20)), int(rng.integers(2, 9))
        heads = int(rng.integers(10, 40))
        cows = int(rng.integers(1, heads))
        forms = (
            f"{x} is taller than {y}, and {y} is taller than {z}. Who is the shortest? Explain.",
            f"If all {g1} are {t} and {x} is one of the {g1}, what can we conclude about {x}?",
            f"If some {g1} are {g2} and all {g2} are {t}, must some {g1} be {t}? Explain your reasoning.",
            f"What number comes next in the sequence {', '.join(str(start + step * i) for i in range(5))}, ...?",
            f"What number comes next: {', '.join(str(start * 2**i) for i in range(5))}, ...? Explain the rule.",
            f"A farmer has chickens and cows: {heads} heads and {2 * heads + 2 * cows} legs in total. How many "
            "cows are there?",
            f"{x} is older than {y}. {z} is younger than {y}. Is {x} older than {z}? Explain.",
            f"{x}, {y} and {z} each have a different pet: a dog, a cat and a fish. {x} does not have the dog, and "
            f"{y} has the fish. Who has which pet?",
        )
        return forms[int(rng.integers(len(forms)))]

    return _distinct(one, count)


_NUMBERED = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*•])\s+(.*\S)\s*$")


def parse_questions(text: str, limit: int = 5) -> list[str]:
    """The well-formed questions of an answer to a QUESTION_WRITING prompt: numbered or bulleted lines that
    end with '?', 4-40 words, mostly letters, without markup; at most `limit`, first ones first."""
    out: list[str] = []
    for line in text.splitlines():
        match = _NUMBERED.match(line)
        if not match:
            continue
        question = match.group(1).replace("**", "").strip()
        words = question.split()
        letters = sum(ch.isalpha() or ch.isspace() for ch in question)
        if (question.endswith("?") and 4 <= len(words) <= 40 and letters >= 0.85 * len(question)
                and not any(ch in question for ch in "{}[]<>|#")):
            if question not in out:
                out.append(question)
        if len(out) == limit:
            break
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class SpecBenchFilter:
    """Refuses prompts that repeat a Spec-Bench turn or share a run of `ngram` consecutive words with one
    (the turns: bench.questions.all_turns; the question file is bench's)."""

    def __init__(self, turns: Iterable[str], ngram: int = 8) -> None:
        self.ngram = ngram
        self.exact = {" ".join(_words(t)) for t in turns}
        self.grams = {g for t in self.exact for g in self._grams(t.split())}

    def _grams(self, words: list[str]) -> set[tuple[str, ...]]:
        return {tuple(words[i:i + self.ngram]) for i in range(len(words) - self.ngram + 1)}

    def overlaps(self, text: str) -> bool:
        words = _words(text)
        return " ".join(words) in self.exact or bool(self._grams(words) & self.grams)
