#!/usr/bin/env python3
# make_corpus.py -- generates tests/tokenizer/corpus.jsonl, the tokenizer parity
# test corpus for inflight's C GPT-2 byte-level BPE tokenizer.
#
# corpus.jsonl format: UTF-8, one test case per line, each line exactly ONE JSON
# string literal (e.g. "Hello, world\n\nfoo").  JSON escapes let a case hold
# newlines, tabs, \r, form feeds and other invisible characters; the file is
# written with ensure_ascii=False so ordinary non-ASCII text stays readable, but
# control characters, line/paragraph separators, non-ASCII spaces and most
# format characters are written as \uXXXX escapes (only BMP ones; non-BMP
# characters are always written raw, never as surrogate-pair escapes), so every
# line is a single physical line for any line splitter.  No line is empty and
# there are no comments.  tests/tokenizer/js_reference.js turns the corpus into
# reference token ids with the npm package gpt-3-encoder@1.1.4.
#
# Guarantees (enforced below; the script fails loudly if one is broken):
#   * every case holds 1..400 code points, no NUL, no surrogates;
#   * every code point is ASSIGNED in /usr/share/unicode/UnicodeData.txt
#     (Unicode 15.0, the table the C tokenizer is built from; "<..., First>" /
#     "<..., Last>" pairs define whole ranges).  node 20 uses Unicode 17, so
#     restricting the corpus to 15.0 keeps \p{L} / \p{N} / \s identical on both
#     sides (checked: no 15.0 code point changes L/N class in node's tables);
#   * no duplicate lines; output is byte-for-byte deterministic (fixed seed, no
#     iteration over sets, independent of PYTHONHASHSEED).
#
# Usage: python3 tests/tokenizer/make_corpus.py [OUT.jsonl] [--ucd UnicodeData.txt]
# (default OUT: corpus.jsonl next to this script).  Statistics go to stderr.
# Standard library only.

import bisect
import json
import os
import random
import sys
import unicodedata

SEED = 20240611
MAX_LEN = 400
MIN_LINES = 2400
MAX_BYTES = 1_500_000
UCD_DEFAULT = "/usr/share/unicode/UnicodeData.txt"


def die(msg):
    sys.stderr.write("make_corpus.py: ERROR: " + msg + "\n")
    sys.exit(1)


# ---------------------------------------------------------------------------
# Unicode 15.0 table
# ---------------------------------------------------------------------------

class UCD:
    def __init__(self, path):
        self.starts = []
        self.ends = []
        self.gcs = []
        first = None
        try:
            fh = open(path, encoding="utf-8")
        except OSError as e:
            die("cannot read %s: %s" % (path, e))
        with fh:
            for line in fh:
                f = line.rstrip("\n").split(";")
                if len(f) < 3:
                    continue
                cp = int(f[0], 16)
                name, gc = f[1], f[2]
                if name.endswith(", First>"):
                    first = (cp, gc)
                    continue
                if name.endswith(", Last>"):
                    if first is None or first[1] != gc:
                        die("malformed range ending at %04X in %s" % (cp, path))
                    self._add(first[0], cp, gc)
                    first = None
                    continue
                self._add(cp, cp, gc)
        if len(self.starts) < 30000:
            die("%s looks truncated (%d entries)" % (path, len(self.starts)))
        if not self.gc(0x1E4D0):
            # U+1E4D0 (Nag Mundari) is new in 15.0; warn if the table is older.
            sys.stderr.write("make_corpus.py: warning: %s predates Unicode 15.0\n" % path)

    def _add(self, a, b, gc):
        if self.starts and a <= self.ends[-1]:
            die("UnicodeData entries out of order at %04X" % a)
        self.starts.append(a)
        self.ends.append(b)
        self.gcs.append(gc)

    def gc(self, cp):
        """General category of cp, or None if unassigned in this table."""
        i = bisect.bisect_right(self.starts, cp) - 1
        if i >= 0 and cp <= self.ends[i]:
            return self.gcs[i]
        return None

    def assigned_list(self, per_range=64, skip=("Cs", "Co")):
        """Assigned code points, in order; big ranges contribute only their
        first `per_range` members so that the list is spread over blocks."""
        out = []
        for a, b, gc in zip(self.starts, self.ends, self.gcs):
            if gc in skip:
                continue
            out.extend(range(a, min(b, a + per_range - 1) + 1))
        return out

    def with_gc(self, wanted):
        out = []
        for a, b, gc in zip(self.starts, self.ends, self.gcs):
            if gc in wanted:
                out.extend(range(a, b + 1))
        return out


# ---------------------------------------------------------------------------
# Corpus assembly helpers
# ---------------------------------------------------------------------------

R = random.Random(SEED)
CASES = []  # list of (category, text), in generation order


def add(cat, s):
    if len(s) > MAX_LEN:
        s = s[:MAX_LEN]
    if s:
        CASES.append((cat, s))


def addall(cat, items):
    for s in items:
        add(cat, s)


def lines(block):
    """Non-empty lines of a triple-quoted block (leading newline ignored)."""
    return [l for l in block.split("\n") if l.strip()]


def pick(seq):
    return seq[R.randrange(len(seq))]


def fullwidth(s):
    out = []
    for c in s:
        o = ord(c)
        if c == " ":
            out.append("\u3000")
        elif 0x21 <= o <= 0x7E:
            out.append(chr(o + 0xFEE0))
        else:
            out.append(c)
    return "".join(out)


ZWJ = "\u200d"
VS16 = "\ufe0f"
VS15 = "\ufe0e"
KEYCAP = "\u20e3"

# ---------------------------------------------------------------------------
# 1. English prose
# ---------------------------------------------------------------------------

SENTENCES = lines("""
The quick brown fox jumps over the lazy dog.
She sold seashells by the seashore, or so the story goes.
It was the best of times; it was the worst of times.
“Are you coming?” she asked. “We’re already late.”
"I don't know," he said, "but I'll find out."
The meeting — scheduled for Monday — was moved to Thursday.
Pages 10–25 cover the basics; chapters 3–5 go deeper.
Wait… what did you just say?
Well... I suppose that's one way to look at it.
Dr. Smith arrived at 9 a.m. sharp, as usual.
The U.S.A. and the U.K. signed the treaty in 1947.
NASA launched the probe; ESA tracked it from Darmstadt.
My favorite colors are red, green, and (occasionally) purple.
Please read the instructions carefully before you begin!
Why would anyone leave the door wide open in winter?
He whispered: “Don’t tell anyone, not even your brother.”
The well-known author wrote a long-awaited, self-published sequel.
Rain fell steadily throughout the night, soaking the old wooden fence.
Our team reviewed 1,204 pull requests last quarter.
After a long pause, the committee approved the budget.
Honestly, I can't believe it's already December.
The library closes early on Sundays and public holidays.
You’ll need a passport, two photographs, and a completed form.
THIS IS NOT A DRILL. PLEASE EVACUATE THE BUILDING IMMEDIATELY.
the lowercase sentence wanders on without any capital letters at all
MiXeD CaSe TeXt Is HaRd To ReAd, BuT ToKeNiZeRs MuSt HaNdLe It.
In 1969, humans first walked on the Moon.
The recipe calls for flour, sugar, eggs, butter; nothing else.
A stitch in time saves nine.
All that glitters is not gold.
Knowledge is power — but only when it is shared.
I’ve been thinking about what you said yesterday.
They’re planning a trip to the mountains next summer.
We’d better hurry, or we’ll miss the last train home.
The children laughed, shouted, and ran across the field.
An apple a day keeps the doctor away, or so they say.
He paused, looked around the room, and then began to speak.
“To be, or not to be: that is the question.”
Is this the real life? Is this just fantasy?
The museum’s new wing houses more than 300 paintings.
Every morning she walks her dog along the river path.
The server responded with an unexpected error message.
Could you please pass the salt and pepper?
My grandmother’s garden was full of roses and lavender.
The train departs from platform 9 at 14:35.
Never underestimate the power of a good night's sleep.
The orchestra tuned their instruments before the concert.
Curiosity killed the cat, but satisfaction brought it back.
The storm knocked out power to thousands of homes.
Our neighbors’ dog barks every time the mail arrives.
I’m not sure whether to laugh or cry.
It’s raining cats and dogs out there!
Fortune favors the bold.
Where there’s smoke, there’s fire.
The early bird catches the worm, but the second mouse gets the cheese.
Mr. and Mrs. Johnson invited us to dinner on Friday.
She earned her Ph.D. in computational linguistics.
The report (see Appendix B) contains the full data set.
Don’t count your chickens before they hatch.
"Quick," she said, "grab the umbrella!"
The sun set slowly behind the distant hills.
I have never seen such a beautiful sunrise.
His handwriting was almost impossible to read.
The cat sat on the mat and stared at the wall.
After dinner, we played cards until midnight.
You can’t judge a book by its cover.
The experiment failed — twice — before it finally worked.
Some people prefer tea; others can’t start the day without coffee.
The price of gasoline rose sharply last month.
That’s the funniest thing I’ve heard all week!
Learning a new language takes patience and practice.
A journey of a thousand miles begins with a single step.
The old lighthouse still guides ships safely into the harbor.
Hmm... let me think about that for a moment.
Oh no! I forgot my keys again.
Yes, no, maybe — who knows?
The hikers reached the summit just before noon.
Her laugh echoed through the empty hallway.
This sentence has exactly seven words in it.
The committee will reconvene at 3:00 p.m. tomorrow.
Please don’t feed the animals.
I would rather walk than wait for the bus.
The painting was sold at auction for an undisclosed sum.
Every cloud has a silver lining.
Silence is golden, but duct tape is silver.
The instructions were clear: mix, stir, bake, and cool.
We hold these truths to be self-evident.
Once upon a time, in a kingdom far, far away, there lived a dragon.
He said he’d call, but he never did.
The weather forecast predicts sunshine with a chance of showers.
The novel’s protagonist is a retired detective named Harold.
Bring a jacket; it gets cold after dark.
Nobody expects the Spanish Inquisition!
The kids built a fort out of blankets and pillows.
According to the survey, 73% of respondents agreed.
The bridge was closed for repairs for six months.
I can’t find my glasses — have you seen them?
The lecture covered everything from atoms to galaxies.
She plays the violin, the piano, and the cello.
What a wonderful world this is.
Let’s agree to disagree.
The tortoise beat the hare, to everyone’s surprise.
There’s no place like home.
He turned the key, and the engine roared to life.
The crowd cheered as the runners crossed the finish line.
Is it Friday yet?
The password must contain at least eight characters.
The gardener trimmed the hedges into perfect spheres.
Time flies like an arrow; fruit flies like a banana.
The store opens at 8 and closes at 10.
We watched the fireworks from the rooftop.
He’s been working at the bakery for twenty years.
Please sign here, here, and here.
The invitation said “formal attire,” but nobody listened.
Laughter is the best medicine.
The plane landed safely despite the heavy fog.
I love you more than words can say.
The scientists published their findings in a peer-reviewed journal.
It’s not a bug; it’s a feature.
The quick brown fox didn’t jump today — it was too tired.
Do or do not. There is no try.
The baby finally fell asleep at 2 a.m.
She opened the letter with trembling hands.
“Elementary, my dear Watson.”
All’s well that ends well.
Actions speak louder than words.
The snow covered everything in a thick white blanket.
I’ll be back.
Go ahead, make my day.
May the Force be with you.
The river flows gently toward the sea.
He bought three apples, two pears, and a melon.
Our flight was delayed by four hours; we missed the connection.
The professor’s office hours are Tuesdays and Thursdays.
That was, without a doubt, the worst movie I have ever seen.
The keys are on the kitchen table, next to the fruit bowl.
Happiness is a warm cup of cocoa on a cold day.
He ran — no, sprinted — to catch the bus.
She’s the kind of person who remembers everyone’s birthday.
The wind howled through the trees all night long.
If at first you don’t succeed, try, try again.
The ship sank in less than three hours.
A penny saved is a penny earned.
Beauty is in the eye of the beholder.
The town’s population doubled in a decade.
They say lightning never strikes the same place twice.
He kept his promise, even when it was inconvenient.
The stars twinkled in the clear night sky.
“Hello?” she called. No answer.
Breaking news: local man finds his car keys.
Warning: contents may be hot.
Note: this offer is valid while supplies last.
P.S. Don’t forget to water the plants.
FYI, the meeting has been cancelled.
ASAP means as soon as possible.
The CEO, CFO, and CTO met behind closed doors.
I read the book in one sitting — all 600 pages.
The dog chased its own tail in circles.
We’re out of milk, eggs, and bread.
It took them ages to assemble the furniture.
Grandpa tells the same jokes every Thanksgiving.
The festival attracts visitors from all over the world.
Mind the gap between the train and the platform.
Smoking is strictly prohibited on this flight.
The volcano erupted without warning.
An ounce of prevention is worth a pound of cure.
The clock struck twelve, and the carriage turned back into a pumpkin.
To err is human; to forgive, divine.
She answered every question correctly — except the last one.
The river’s banks overflowed after the heavy rain.
Hope is the thing with feathers.
Two roads diverged in a yellow wood.
Tell me, and I forget; teach me, and I may remember.
“Why?” “Because.” “Because why?” “Just because!”
There were 12 eggs in the carton; now there are 3.
Several weeks passed before anyone noticed.
He didn’t say a word — he simply smiled.
The manuscript was lost, then found, then lost again.
Please remain seated until the aircraft comes to a complete stop.
The hotel room had a stunning view of the ocean.
They’ve lived in the same house for forty years.
It’s a small world after all.
The mechanic said the brakes needed replacing.
He studied hard and passed the exam with flying colors.
She couldn’t decide between the blue dress and the red one.
The pizza arrived cold, and the soda was warm.
What goes up must come down.
Despite the rain, the parade went ahead as planned.
My phone’s battery died in the middle of the call.
I think, therefore I am.
The toddler insisted on wearing rain boots to the beach.
This is the last time I’m going to ask nicely.
The puppy’s ears perked up at the sound of the can opener.
Some days you eat the bear, and some days the bear eats you.
She paints landscapes in watercolor and oils.
The conference was held in a renovated warehouse downtown.
A picture is worth a thousand words.
The elevator is out of order; please use the stairs.
He whistled a cheerful tune while washing the dishes.
The secret ingredient is — wait for it — cinnamon.
Your call is important to us. Please stay on the line.
Unfortunately, the item you requested is out of stock.
The results were, to put it mildly, disappointing.
Thank you for your patience and understanding.
Hello, world!
Goodbye, cruel world...
OK, so here's the plan: we wait, we watch, and we act.
ALL CAPS FOR EMPHASIS, lowercase for calm.
i.e., e.g., etc., vs., cf., et al.
The word "quote" appears in 'single' and "double" and “curly” and ‘curly single’ quotes.
She said, ‘He told me, “Never again.”’
...and that's how it ended.
—So you're leaving?
– Yes, tomorrow.
The end.
""")

PARA_SEPS = [" ", " ", " ", "  ", "\n", "\n\n", "\n\n", " \n", "\r\n", "\n\n\n", "\t"]


def gen_prose():
    for s in SENTENCES:
        add("prose", s)
    for _ in range(170):
        k = R.randint(2, 5)
        parts = [pick(SENTENCES) for _ in range(k)]
        out = parts[0]
        for p in parts[1:]:
            out += pick(PARA_SEPS) + p
        add("prose", out)
    transforms = [str.upper, str.lower, str.title, str.swapcase]
    for _ in range(60):
        s = pick(SENTENCES)
        add("prose", pick(transforms)(s))
    # indented paragraphs / dialogue
    for _ in range(25):
        k = R.randint(2, 4)
        out = "\n".join(pick(["    ", "\t", "  ", ""]) + pick(SENTENCES) for _ in range(k))
        add("prose", out)


# ---------------------------------------------------------------------------
# 2. Source code
# ---------------------------------------------------------------------------

CODE_SNIPPETS = [
r'''#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 1;
    }
    printf("Hello, %s!\n", argv[1]);
    return 0;
}''',
r'''/* Compute the n-th Fibonacci number iteratively. */
static unsigned long long fib(unsigned n) {
    unsigned long long a = 0, b = 1;
    for (unsigned i = 0; i < n; ++i) {
        unsigned long long t = a + b;  // may overflow for n > 93
        a = b;
        b = t;
    }
    return a;
}''',
r'''typedef struct node {
    int key;
    struct node *left, *right;
} node_t;

node_t *insert(node_t *root, int key) {
    if (!root) { node_t *n = calloc(1, sizeof *n); n->key = key; return n; }
    if (key < root->key) root->left = insert(root->left, key);
    else if (key > root->key) root->right = insert(root->right, key);
    return root;
}''',
r'''#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ARRAY_LEN(x) (sizeof(x) / sizeof((x)[0]))
static const char *names[] = {"alpha", "beta", "gamma", NULL};
static const int primes[] = {2, 3, 5, 7, 11, 13};
uint32_t mask = 0xFFu << 8 | 0x0F;
x = (y >> 3) & ~mask ^ 0x55;
ptr->field += arr[i++] * *p--;''',
r'''while ((c = getchar()) != EOF) {
    switch (c) {
    case '\n': lines++; /* fallthrough */
    case ' ':
    case '\t': in_word = 0; break;
    default:
        if (!in_word) { words++; in_word = 1; }
    }
}''',
r'''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    seq = [0, 1]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]


if __name__ == "__main__":
    print(fibonacci(10))''',
r'''class Stack:
    def __init__(self):
        self._items = []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise IndexError("pop from empty stack")
        return self._items.pop()

    def __len__(self):
        return len(self._items)''',
r'''import os, sys, json
from collections import defaultdict

counts = defaultdict(int)
for path in sys.argv[1:]:
    with open(path, encoding='utf-8') as fh:
        for line in fh:
            for word in line.split():
                counts[word.lower()] += 1
print(json.dumps(dict(sorted(counts.items())), indent=2))''',
r'''squares = [x**2 for x in range(10) if x % 2 == 0]
lookup = {'a': 1, 'b': 2, "c": 3}
letters = ['x', 'y', 'z']
s = f"{name!r:>10} has {len(items):,d} items ({ratio:.2%})"
lam = lambda a, *args, **kw: (a, args, kw)
assert x != y and not (a <= b >= c), "bad order"
result = a // b ** 2 % c @ matrix''',
r'''@dataclass(frozen=True)
class Point:
    x: float = 0.0
    y: float = 0.0

    def __add__(self, other: "Point") -> "Point":
        return Point(self.x + other.x, self.y + other.y)

try:
    p = Point(1, 2) + Point(3, 4)
except (TypeError, ValueError) as exc:  # noqa: E722
    logging.exception("failed: %s", exc)''',
r'''function debounce(fn, ms = 250) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn.apply(this, args), ms);
  };
}

const onResize = debounce(() => console.log(`size: ${window.innerWidth}x${window.innerHeight}`));
window.addEventListener('resize', onResize);''',
r'''const users = await fetch("/api/users?limit=10")
  .then(res => res.json())
  .catch(err => { console.error(err); return []; });
const names = users.filter(u => u.active && u.age >= 18).map(({ first, last }) => `${first} ${last}`);
export default { names, count: names?.length ?? 0 };''',
r'''// Strict equality vs loose equality
if (a === b || c !== d) { x ||= 1; y &&= 2; z ??= 3; }
let re = /^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$/i;
const obj = { 'key-with-dash': true, "quoted": [1, 2, 3], nested: { deep: null } };
for (const [k, v] of Object.entries(obj)) console.log(k, '=>', v);''',
r'''{
  "name": "example",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "build": "tsc -p .",
    "test": "jest --coverage"
  },
  "dependencies": {
    "express": "^4.18.2",
    "lodash": "~4.17.21"
  }
}''',
r'''{"id": 42, "title": "Hello \"world\"", "tags": ["a", "b", "c"], "price": 19.99, "in_stock": false, "meta": null, "path": "C:\\Users\\me", "emoji": "\ud83d\ude00", "nested": {"list": [[1, 2], [3, 4]], "empty": {}}}''',
r'''[
	{"x": 1, "y": 2},
	{"x": -3.5e2, "y": 0.001},
	{"x": true, "y": "tab\tseparated"}
]''',
r'''#!/usr/bin/env bash
set -euo pipefail

for f in *.log; do
    if [[ -s "$f" ]]; then
        gzip -9 "$f" && echo "compressed $f"
    fi
done
find . -name '*.tmp' -mtime +7 -print0 | xargs -0 rm -f
echo "done: $(date +%Y-%m-%dT%H:%M:%S)" >> /var/log/cleanup.log 2>&1''',
r'''$ ls -la /usr/local/bin | grep -E '^-.*x' | wc -l
$ export PATH="$HOME/.local/bin:$PATH"
$ curl -sSL https://example.com/install.sh | sh -s -- --yes
$ tar -xzvf archive.tar.gz -C /tmp/out && cd /tmp/out
$ git log --oneline --graph --all | head -n 20
$ sudo apt-get install -y build-essential''',
r'''SELECT u.id, u.name, COUNT(o.id) AS order_count, SUM(o.total) AS revenue
FROM users u
LEFT JOIN orders o ON o.user_id = u.id AND o.status <> 'cancelled'
WHERE u.created_at >= '2023-01-01'
GROUP BY u.id, u.name
HAVING COUNT(o.id) > 5
ORDER BY revenue DESC
LIMIT 10;''',
r'''CREATE TABLE IF NOT EXISTS products (
    id          SERIAL PRIMARY KEY,
    sku         VARCHAR(32) NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    price_cents INTEGER CHECK (price_cents >= 0),
    created_at  TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO products (sku, name, price_cents) VALUES ('A-001', 'Widget', 499), ('B-002', 'Gadget''s box', 1299);
-- update prices
UPDATE products SET price_cents = price_cents * 1.1 WHERE sku LIKE 'A-%';''',
r'''<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Test &amp; Demo</title>
  <link rel="stylesheet" href="/static/style.css">
</head>
<body>
  <!-- main content -->
  <div class="container" id='main'>
    <h1>Hello, <em>world</em>!</h1>
    <p>Price: &euro;5 &lt; &pounds;10 &gt; &#36;3</p>
    <a href="https://example.com/?a=1&b=2">link</a>
  </div>
</body>
</html>''',
r'''<ul>
	<li><input type="checkbox" checked> Done</li>
	<li><input type="checkbox"> Todo</li>
</ul>
<script>
	document.querySelectorAll('li').forEach(li => li.onclick = () => li.classList.toggle("active"));
</script>
<style>
	li.active { color: #ff0000; font-weight: bold; }
</style>''',
r'''body {
    margin: 0;
    padding: 0 1rem;
    font: 16px/1.5 "Helvetica Neue", Arial, sans-serif;
}
.btn:hover, .btn:focus-visible {
    background: rgba(0, 0, 0, .05);
    transition: all 150ms ease-in-out;
}
@media (max-width: 600px) { .sidebar { display: none !important; } }''',
r'''fn main() {
    let v: Vec<u32> = (1..=10).filter(|x| x % 3 != 0).collect();
    let sum: u32 = v.iter().sum();
    println!("sum = {sum}, v = {:?}", v);
    match sum {
        0 => println!("zero"),
        n if n > 40 => println!("big: {}", n),
        _ => {}
    }
}''',
r'''package main

import (
	"fmt"
	"strings"
)

func main() {
	words := strings.Fields("the quick brown fox")
	for i, w := range words {
		fmt.Printf("%d: %q\n", i, w)
	}
	m := map[string]int{"a": 1, "b": 2}
	_ = m
}''',
r'''CC      ?= cc
CFLAGS  += -O2 -Wall -Wextra -std=c11
SRCS    := $(wildcard src/*.c)
OBJS    := $(SRCS:.c=.o)

all: inflight

inflight: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $^ -lm

%.o: %.c
	$(CC) $(CFLAGS) -c -o $@ $<

clean:
	rm -f $(OBJS) inflight
.PHONY: all clean''',
r'''# config.yaml
server:
  host: 0.0.0.0
  port: 8080
  tls: false
models:
  - name: gpt2
    path: ./weights/gpt2.bin
    max_tokens: 1024
  - name: "gpt2-medium"
    path: './weights/gpt2-medium.bin'
logging: { level: debug, file: ~ }''',
r'''public class Main {
    public static void main(String[] args) throws Exception {
        List<String> xs = Arrays.asList("a", "b", "c");
        Map<String, Integer> m = new HashMap<>();
        for (String s : xs) m.merge(s, 1, Integer::sum);
        System.out.println(m);  // {a=1, b=1, c=1}
    }
}''',
r'''#include <vector>
#include <iostream>
template <typename T>
T accumulate(const std::vector<T>& v) {
    T total{};
    for (auto const& x : v) total += x;
    return total;
}
int main() { std::cout << accumulate<int>({1, 2, 3}) << std::endl; }''',
r'''-- Lua
local function greet(name)
  return ("Hello, %s!"):format(name or "world")
end
for i = 1, 3 do print(i, greet()) end
--[[ multi-line
     comment ]]''',
r'''(defun factorial (n)
  (if (<= n 1)
      1
      (* n (factorial (- n 1)))))
;; => (factorial 10) => 3628800''',
r'''mov eax, 1          ; syscall: exit
xor ebx, ebx        ; status 0
int 0x80
section .data
msg db "Hello", 0x0A, 0''',
r'''diff --git a/src/main.c b/src/main.c
index 3b18e51..a1c2f4d 100644
--- a/src/main.c
+++ b/src/main.c
@@ -1,5 +1,6 @@
 #include <stdio.h>
+#include <string.h>
 int main(void) {
-    puts("hi");
+    puts("hello");
     return 0;
 }''',
r'''Traceback (most recent call last):
  File "/home/user/app.py", line 42, in <module>
    main()
  File "/home/user/app.py", line 17, in main
    value = int(raw)
ValueError: invalid literal for int() with base 10: 'abc'
''',
r'''2024-03-05 12:34:56,789 INFO  [main] server.c:123 listening on 0.0.0.0:8080
2024-03-05 12:34:57,001 WARN  [worker-3] kv_cache.c:88 cache 91% full (29871/32768 blocks)
2024-03-05 12:35:00,450 ERROR [worker-1] http.c:401 client 10.0.0.7 sent malformed header "Content-Length: -1"''',
r'''key=value
path=/usr/local/share
# comment line
; another comment
[section.sub]
enabled = yes
list = a,b,c''',
r'''    if (x) {
	/* mixed tabs and spaces */
    	y = 1;
	    z = 2;
    }''',
r'''const regex = /\b(\w+)\s+\1\b/g;
const str = 'It\'s a "test" string with \\ backslashes and \u00e9 escapes';
const tpl = `multi
line ${"template"}`;''',
r'''#!/usr/bin/env python3
# -*- coding: utf-8 -*-
print('\t'.join(['a', 'b', 'c']))
print("{\"a\",\"b\"}")
print(r'C:\path\to\file')
x = 0b1010 | 0o17 ^ 0xFF
''',
]


CODE_FIXED = [
    '{"a","b"}', "['x','y']", '["a","b","c"]', "[1,2],[3,4]", "f('a','b')", '{"k":"v","k2":"v2"}',
    "x=>x*2", "a->b", "i++;--j;", "if(a&&b||!c){}", "#include<stdio.h>", "x += 1  # comment",
    "// TODO: fix this", "/* block */", "<!-- html comment -->", "-- sql comment", "; asm comment",
    "'''docstring'''", '"""docstring"""', "`template ${x}`", "s/foo/bar/g", r"^\d{3}-\d{4}$",
    '\tprintf("%d\\n", x);', "\t\tif (x) {\n\t\t\treturn;\n\t\t}", "int main(){return 0;}",
]


def gen_code():
    addall("code", CODE_FIXED)
    variants = []
    for snip in CODE_SNIPPETS:
        variants.append(snip)
        # tab-indented variant (every 4 leading spaces -> tab)
        tabbed = []
        for l in snip.split("\n"):
            n = len(l) - len(l.lstrip(" "))
            tabbed.append("\t" * (n // 4) + " " * (n % 4) + l.lstrip(" "))
        variants.append("\n".join(tabbed))
        # 2-space indent variant
        two = []
        for l in snip.split("\n"):
            n = len(l) - len(l.lstrip(" "))
            two.append(" " * (n // 2) + l.lstrip(" "))
        variants.append("\n".join(two))
    for v in variants:
        ls = v.split("\n")
        # whole snippet, or chunks of whole lines under MAX_LEN
        chunk = []
        size = 0
        for l in ls:
            if chunk and size + len(l) + 1 > MAX_LEN:
                add("code", "\n".join(chunk))
                chunk, size = [], 0
            chunk.append(l)
            size += len(l) + 1
        if chunk:
            add("code", "\n".join(chunk))
    for snip in CODE_SNIPPETS:
        ls = snip.split("\n")
        for _ in range(4):
            i = R.randrange(len(ls))
            j = min(len(ls), i + R.randint(1, 6))
            piece = "\n".join(ls[i:j])
            if R.random() < 0.2:
                piece = piece.replace("\n", "\r\n")
            if R.random() < 0.2:
                piece += "\n"
            add("code", piece)
    # single code lines with trailing whitespace / odd indentation
    all_lines = [l for s in CODE_SNIPPETS for l in s.split("\n") if l.strip()]
    for _ in range(60):
        l = pick(all_lines)
        add("code", pick(["", " ", "  ", "\t", "\t\t", "        ", " \t"]) + l.strip()
            + pick(["", "", " ", "  ", "\t", "\n", " \n"]))


# ---------------------------------------------------------------------------
# 3. Numbers
# ---------------------------------------------------------------------------

def group(n, sep=","):
    s = str(n)
    out = []
    while len(s) > 3:
        out.insert(0, s[-3:])
        s = s[:-3]
    out.insert(0, s)
    return sep.join(out)


NUMBER_FIXED = lines("""
1,000,000
3.14e-10
6.022E23
-1.5e+3
0xFF
0xdeadBEEF
0b1010_1010
0o755
1_000_000
1.2.3
v2.0.0-beta.1
1.2.3-rc.4+build.567
Python 3.11.7 and Node v20.11.1
$4.99
€5
£3
¥1000
₹250
₿0.0012
12,50 €
-$3.50
USD 1,234.56
45%
12.5 %
100%
0.01%
-273.15°C is absolute zero.
98.6°F
2024-01-15
15/01/2024
01.15.2024
Jan 15, 2024
2024-01-15T13:45:30Z
2024-01-15T13:45:30.123+05:30
12:34
23:59:59
7:05 p.m.
10am-2pm
+1 (555) 123-4567
555.123.4567
+44 20 7946 0958
0800-123-456
192.168.0.1:8080
ISBN 978-3-16-148410-0
4111 1111 1111 1111
48.8566° N, 2.3522° E
1920x1080 @ 60fps
9.81 m/s²
100 m²
3/4 cup
1st 2nd 3rd 4th 11th 12th 13th 21st 22nd 23rd 101st
COVID-19
x86_64
H2O
mp3
Web3
B2B
24/7
3:2
1e6
007
000000
0.000001
-0
+0
.5
5.
1.
Pi is 3.14159265358979323846264338327950288419716939937510
The year 2000 problem (Y2K) affected 1999-12-31 → 2000-01-01.
Room 101, Floor 4B, Building 7
Order #12345-ABC shipped on 03/04/05.
Call 911 or 112.
Version 10.0.19045.3803
SHA 3f786850e387550fdab836ed7e6dc881de23001b
UUID 123e4567-e89b-12d3-a456-426614174000
1,234,567,890.0987654321
1.000.000,00 €
1'000'000 CHF
1 000 000
""")


def gen_numbers():
    addall("numbers", NUMBER_FIXED)
    add("numbers", "1\u00a0000\u00a0000 km")
    add("numbers", "1\u2009000\u2009000")
    add("numbers", "10\u202f000 €")
    words = ["items", "users", "km", "kg", "ms", "tokens", "bytes", "people", "points", "votes"]
    curr = ["$", "€", "£", "¥", "₹", "₩", "₽", "CHF ", "USD ", "R$", "₺", "₪"]
    for _ in range(190):
        kind = R.randrange(14)
        if kind == 0:
            n = R.randint(0, 10 ** R.randint(1, 12))
            s = "%s %s" % (group(n, pick([",", ".", " ", "'", "_"])), pick(words))
        elif kind == 1:
            s = "%.*f" % (R.randint(1, 6), R.uniform(-1000, 1000))
        elif kind == 2:
            s = "%.*e" % (R.randint(0, 5), R.uniform(-1e5, 1e5) * 10 ** R.randint(-30, 30))
            if R.random() < 0.5:
                s = s.upper()
        elif kind == 3:
            y, m, d = R.randint(1900, 2099), R.randint(1, 12), R.randint(1, 28)
            s = pick(["%04d-%02d-%02d", "%02d/%02d/%04d", "%d.%d.%d"]) % pick([(y, m, d), (d, m, y), (m, d, y)])
        elif kind == 4:
            s = "%02d:%02d" % (R.randint(0, 23), R.randint(0, 59))
            if R.random() < 0.5:
                s += ":%02d" % R.randint(0, 59)
            if R.random() < 0.3:
                s += ".%03d" % R.randint(0, 999)
            s = pick(["at ", "", "Meeting at ", "T"]) + s
        elif kind == 5:
            s = "+%d %d %03d %04d" % (R.randint(1, 99), R.randint(10, 999), R.randint(0, 999), R.randint(0, 9999))
        elif kind == 6:
            s = pick(["0x%X", "0x%x", "%#06x", "#%06x", "0X%08X"]) % R.randint(0, 2 ** 32 - 1)
        elif kind == 7:
            s = "v" * R.randint(0, 1) + ".".join(str(R.randint(0, 40)) for _ in range(R.randint(2, 4)))
        elif kind == 8:
            s = pick(curr) + "%d.%02d" % (R.randint(0, 99999), R.randint(0, 99))
        elif kind == 9:
            s = "%s%%" % pick([str(R.randint(0, 100)), "%.1f" % R.uniform(0, 100), "-%d" % R.randint(1, 50)])
        elif kind == 10:
            s = "%d.%d.%d.%d" % tuple(R.randint(0, 255) for _ in range(4))
        elif kind == 11:
            s = "".join(R.choice("0123456789") for _ in range(R.randint(5, 60)))
        elif kind == 12:
            s = "%d/%d" % (R.randint(1, 99), R.randint(1, 99))
        else:
            s = " ".join(str(R.randint(-10 ** 6, 10 ** 6)) for _ in range(R.randint(2, 10)))
        if R.random() < 0.3:
            s = pick(["The total was ", "Approximately ", "(", "Value: ", "about ", "["]) + s + pick(["", ".", ")", "!", " or so.", "]"])
        add("numbers", s)


# ---------------------------------------------------------------------------
# 4. Whitespace
# ---------------------------------------------------------------------------

WS_FIXED = [
    " ", "  ", "   ", "\n", "\n\n", "\n\n\n", " \n ", "\t", "\t\t", "\r\n", "\r", "\r\r\n",
    "\n \n", "  \n  ", "\t\n\t", " \t \t ", "\x0b", "\x0c", "\x0c\n", "\u00a0", "\u3000", "\u2009",
    "hello world", "hello  world", "hello   world", "hello    world", "hello\tworld",
    "hello\t\tworld", "hello \tworld", "hello\t world", "hello\nworld", "hello\n\nworld",
    "hello \nworld", "hello\n world", "hello \n world", "hello\r\nworld", "hello\rworld",
    "   leading spaces", "trailing spaces   ", "  both  ", "\tleading tab", "trailing tab\t",
    "\nleading newline", "trailing newline\n", "line one\n    \nline three",
    "a\n\n\n\nb", "a \n \n \nb", "x\x0cy", "x\x0by", "word\u00a0word", "100\u00a0km",
    "M.\u00a0Dupont", "«\u202fBonjour\u202f!\u202f»", "日本語\u3000テキスト", "1\u2009234\u2009567",
    "a\u2028b", "a\u2029b", "a\u1680b", "a\u205fb", "a\u200ab", "a\u2000b\u2001c\u2002d\u2003e",
    "a\u2004b\u2005c\u2006d\u2007e\u2008f", "\ufeffBOM at start", "zero\u200bwidth\u200bspace",
    "next\u0085line", "mongolian\u180evowel", " \u00a0 \u00a0 ", "\u00a0\u00a0\u00a0x",
    "x\u00a0\u00a0\u00a0", " \u3000 ", "\u3000\u3000全角", "\t \n \r\n \x0b \x0c ",
    "end with space ", "end with two  ", " start with one", "  start with two",
    "    four-space indent", "        eight-space indent", "  \n", "\n  ", " \t", "\t ",
    "a" + " " * 50 + "b", " " * 64, "\n" * 32, "\t" * 20, "\r\n" * 10, " \n" * 10,
]

WS_POOL = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c",
           "\u00a0", "\u3000", "\u2009", "\u202f", "\u2028", "\u2029", "\u1680", "\u205f",
           "\ufeff", "\u2003", " \u00a0", "\u00a0 ", " \n", "\n ", "\t ", " \t"]
WORDS = ["the", "cat", "Hello", "world", "I", "a", "foo", "bar", "x", "don't", "123", "4.5",
         "über", "naïve", "日本", "Привет", "😀", "!", "?", "...", "(", ")", "'s", "it's", "—"]


def gen_whitespace():
    addall("whitespace", WS_FIXED)
    for n in range(1, 34):
        add("whitespace", " " * n + "word")
        add("whitespace", "word" + " " * n)
    for n in (4, 5, 7, 9, 17):
        add("whitespace", "\n" * n)
        add("whitespace", " " * n + "\n")
    for _ in range(60):
        add("whitespace", "".join(pick(WS_POOL) for _ in range(R.randint(1, 8))))
    for _ in range(110):
        k = R.randint(2, 8)
        out = []
        if R.random() < 0.4:
            out.append(pick(WS_POOL))
        for i in range(k):
            if i:
                out.append(pick(WS_POOL))
            out.append(pick(WORDS))
        if R.random() < 0.4:
            out.append(pick(WS_POOL))
        add("whitespace", "".join(out))


# ---------------------------------------------------------------------------
# 5. Contractions
# ---------------------------------------------------------------------------

SUFFIXES = ["s", "t", "re", "ve", "m", "ll", "d"]


def case_variants(s):
    out = [""]
    for c in s:
        out = [o + v for o in out for v in (c.lower(), c.upper())]
    return out


CONTRACTION_FIXED = lines("""
I'm sure they'll say it's fine, but we'd've known if you're right.
DON'T YOU DARE TELL ME WHAT I CAN'T DO.
Y'ALL'D'VE DONE IT TOO.
y'all'd've done it too
rock 'n' roll
'tis the season
'Twas the night before Christmas
It's five o'clock somewhere.
Shaquille O'Neal and Conan O'Brien
the '90s and the 1980's
the dogs' bowls and the dog's bowl
James's book and Jameses' books
'quoted' words in 'single quotes'
' s
'S
'LL
'Ll
'lL
'll've
''
'''
'''s
'''s'''
it'sn't
're're
'd'd'd
can't't
5's and 10's
#'s and @'s
!'s
's it
'sup
'm'
'set the table'
'tell me'
'really?'
'very good'
'more please'
'ddd
'lll
'vvv
'rer
'tt
I’ve been there. You’re here. We’ll go. They’d know. It’s done. Don’t stop. I’m fine.
IT’S DONE. DON’T STOP. I’M FINE. WE’LL GO.
it‘s wrong quote
it`s a backtick
It＇s full-width
he said ‘it’s fine’ and left
O’Reilly’s books
'S'T'RE'VE'M'LL'D
'S 'T 'RE 'VE 'M 'LL 'D
's 't 're 've 'm 'll 'd
's't're've'm'll'd
I'M, YOU'RE, HE'S, WE'VE, THEY'LL, SHE'D, ISN'T
I'M, you'RE, he'S, we'VE, they'LL, she'D, isn'T
Mixed: I'M you'Re he'S we'vE they'Ll she'D
'
' '
x'
'x
a'b'c'd'e
it ' s
it' s
it 's
he'd've'd
shouldn't've
""")


def gen_contractions():
    addall("contractions", CONTRACTION_FIXED)
    bases = ["it", "he", "she", "they", "we", "you", "I", "John", "dog", "that", "who", "there",
             "IT", "HE", "They", "Y", "x", "2", "!", ""]
    for suf in SUFFIXES:
        for var in case_variants(suf):
            for apos in ("'", "\u2019"):
                add("contractions", "%s%s%s" % (pick(bases), apos, var))
            add("contractions", "%s'%s %s" % (pick(bases), var, pick(SENTENCES)))
    apostrophes = ["'", "'", "'", "\u2019", "\u2018", "`", "\u02bc", "\uff07", "\u2032"]
    tails = SUFFIXES + ["", "ss", "set", "tea", "ream", "very", "mall", "lla", "dd", "x", "S", "LL", "RE", "'"]
    for _ in range(120):
        s = "".join(R.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(R.randint(0, 6)))
        if R.random() < 0.4:
            s = s.capitalize() if R.random() < 0.5 else s.upper()
        t = pick(tails)
        if R.random() < 0.3:
            t = t.upper()
        out = s + pick(apostrophes) + t
        if R.random() < 0.4:
            out = pick(["", " ", "  ", "\n"]) + out + pick(["", " ", ".", "!", " more", "'s"])
        add("contractions", out)


# ---------------------------------------------------------------------------
# 6. Accented Latin
# ---------------------------------------------------------------------------

LATIN = lines("""
L'été dernier, nous sommes allés à la plage près de Saint-Malo.
Où est la bibliothèque ? Je ne la trouve pas !
Ça coûte très cher, n'est-ce pas ?
Le cœur a ses raisons que la raison ne connaît point.
« Bonjour », dit-elle, « comment ça va aujourd'hui ? »
Les élèves ont étudié l'œuvre de Molière en français.
Noël approche : on prépare la bûche et le pain d'épices.
Il était une fois une reine qui vivait dans un château.
Größere Straßen führen über die Brücke nach Köln.
Der Bär schläft im Wald, während die Vögel zwitschern.
Übung macht den Meister.
Können Sie mir bitte sagen, wo der Bahnhof ist?
Äpfel, Öl und Süßigkeiten kosten zusammen 12,50 €.
Fußgänger müssen hier besonders aufpassen.
ẞ ist der große Buchstabe für ß.
„Das ist ja unglaublich!“, rief er.
¿Dónde está el baño? ¡Necesito ayuda, por favor!
El niño comió una piña en la mañana.
La canción del año pasado todavía suena en la radio.
Mañana será otro día, señor Muñoz.
Él dijo que sí, pero ella respondió que no.
Los pingüinos viven en el hemisferio sur.
A informação está disponível no coração da cidade.
Não sei se ele vai à reunião amanhã.
As crianças comeram pão com manteiga e açúcar.
São Paulo é a maior cidade do Brasil.
Você já visitou a região do Algarve?
Zażółć gęślą jaźń.
Chrząszcz brzmi w trzcinie w Szczebrzeszynie.
Łódź jest trzecim co do wielkości miastem w Polsce.
Dziękuję bardzo, to była świetna książka.
Pójdź, kińże tę chmurność w głąb flaszy!
İstanbul'da yaşıyorum ve Türkçe öğreniyorum.
Pijamalı hasta yağız şoföre çabucak güvendi.
Işık ılık, su çok soğuk.
Günaydın! Nasılsınız?
Çocuklar bahçede oynuyor, ağaçlar çiçek açmış.
Tiếng Việt có nhiều dấu thanh.
Tôi yêu Hà Nội và thành phố Hồ Chí Minh.
Chúc mừng năm mới! Cảm ơn bạn rất nhiều.
Những đứa trẻ đang chơi đùa ở sân trường.
Phở bò là món ăn nổi tiếng của người Việt.
Příliš žluťoučký kůň úpěl ďábelské ódy.
Þú ert með ógleymanlegt bros – Ævar og Þórður.
Știința și înțelepciunea țării.
Árvíztűrő tükörfúrógép.
Blåbærgrød med fløde på Ærø.
Đurđa je čitala knjigu o šumi.
Ķēniņš ēda gaļu un dzēra ūdeni.
Ĉiuĵaŭde eĥoŝanĝo.
Ħobż u ġbejna.
Ångström, Øresund, Ærøskøbing.
Ōsaka, Kyōto, Tōkyō, Hokkaidō.
Crème brûlée, jalapeño, façade, déjà vu, naïve, coöperate.
""")


def gen_latin():
    addall("latin_accented", LATIN)
    for s in LATIN:
        if R.random() < 0.35:
            add("latin_accented", s.upper())
    for _ in range(55):
        a, b = pick(LATIN), pick(LATIN)
        add("latin_accented", a + pick([" ", "\n", "  ", " — "]) + b)
    accented = [c for c in "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿāăąćčďđēėęěğīįıķļľłńņňōőœŕřśşšţťūůűųźżžșțơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ"]
    for _ in range(30):
        w = "".join(pick(accented) if R.random() < 0.4 else R.choice("abcdefghijklmnoprstuvz") for _ in range(R.randint(3, 14)))
        add("latin_accented", pick(["", " "]) + (w.capitalize() if R.random() < 0.3 else w))


# ---------------------------------------------------------------------------
# 7. Other scripts
# ---------------------------------------------------------------------------

SCRIPTS = lines("""
Καλημέρα σας! Πώς είστε;
Καλημέρα σας! Πώς είστε\u037e
Η γλώσσα μου έδωσαν ελληνική.
Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.
Τα παιδιά παίζουν στην αυλή.
Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.
ΑΘΗΝΑ — ΘΕΣΣΑΛΟΝΙΚΗ: 502 χλμ.
Съешь же ещё этих мягких французских булок, да выпей чаю.
Привет, мир! Как дела?
Москва — столица России.
«Война и мир» — роман Льва Толстого.
Гей, хто там ґудзиком їжака?
Слава Україні! Це їхня земля.
Љубав и њива, џем и ђак.
Ъгълът на улицата е тих.
Қазақстан Республикасы — Орталық Азиядағы мемлекет.
ЁЛКА И ЕЖИК
مرحبا بالعالم
السلام عليكم ورحمة الله وبركاته
اللغة العربية جميلة جداً.
بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ
كم عمرك؟ عمري ٢٥ سنة.
سلام، حال شما چطور است؟ من می‌خواهم فارسی یاد بگیرم.
اردو ایک خوبصورت زبان ہے۔
שלום עולם
אני אוהב ללמוד עברית.
בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ.
מה שלומך? הכל בסדר.
נמסטה, מה קורה ב-2024?
नमस्ते दुनिया
मैं हिंदी सीख रहा हूँ।
भारत एक विशाल देश है।
संस्कृतम् जगतः एकतमा अतिप्राचीना भाषा।
मेरा फ़ोन नंबर १२३४५ है।
क्षत्रिय, ज्ञान, श्री, त्र
สวัสดีครับ
ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ
ผมชอบกินข้าวผัด และต้มยำกุ้ง
ราคา ๑๒๓ บาท
გამარჯობა, როგორ ხარ?
საქართველო ლამაზი ქვეყანაა.
ᲡᲐᲥᲐᲠᲗᲕᲔᲚᲝ
Բարև Ձեզ, ինչպե՞ս եք։
Հայաստանը գեղեցիկ երկիր է։
আমি বাংলায় গান গাই।
வணக்கம் உலகம்
தமிழ் ஒரு பழமையான மொழி.
ሰላም ለዓለም
ኢትዮጵያ በአፍሪካ ቀንድ ትገኛለች።
សួស្តីពិភពលោក
ආයුබෝවන්
မင်္ဂလာပါ
ສະບາຍດີ
નમસ્તે
ਸਤ ਸ੍ਰੀ ਅਕਾਲ
నమస్కారం
ನಮಸ್ಕಾರ
നമസ്കാരം
བཀྲ་ཤིས་བདེ་ལེགས།
ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ
ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ
ᐃᓄᒃᑎᑐᑦ
ܫܠܡܐ ܥܠܡܐ
ދިވެހި
ⵜⴰⵎⴰⵣⵉⵖⵜ
ꦲꦤꦕꦫꦏ
𐌷𐌰𐌹𐌻𐍃 𐌰𐌹𐍅𐌰
𐐷𐐶𐐻 𐐼𐐯𐑅𐐨𐑉𐐯𐐻
𒀀𒀁𒀂 𓀀𓂀𓃰
𐀀𐀁𐀂 𐎀𐎁𐎂
""")


def gen_scripts():
    addall("scripts", SCRIPTS)
    for _ in range(90):
        k = R.randint(2, 3)
        add("scripts", pick([" ", "\n", " ", ", "]).join(pick(SCRIPTS) for _ in range(k)))
    for s in SCRIPTS[:17]:  # Greek + Cyrillic case mappings
        add("scripts", s.upper())
        add("scripts", s.lower())


# ---------------------------------------------------------------------------
# 8. CJK and full-width
# ---------------------------------------------------------------------------

CJK = lines("""
你好，世界！
我爱北京天安门。
今天天气很好，我们去公园散步吧。
中华人民共和国成立于1949年10月1日。
學而時習之，不亦說乎？
这是一个测试句子，用于检查分词器。
机器学习和人工智能正在改变世界。
他说：“我明天来。”
《红楼梦》是中国古典小说。
价格：￥128.00（含税）
こんにちは世界
私は日本語を勉強しています。
東京は日本の首都です。
カタカナとひらがなと漢字を混ぜて書きます。
「吾輩は猫である。名前はまだ無い。」
ﾊﾝｶｸｶﾀｶﾅﾃﾞｽ｡ｺﾝﾆﾁﾊ｡
ラーメンを食べたい！
令和5年4月1日（土）
ありがとうございます〜
ヴァイオリンとチェロ
時々、人々、いすゞ
안녕하세요, 세계!
한국어를 공부하고 있어요.
서울은 대한민국의 수도입니다.
감사합니다 ㅋㅋㅋ ㅎㅎ
대한민국 만세!
ＡＢＣ　ｄｅｆ　１２３！？
（全角）［括弧］｛テスト｝
＄１００．００
ｈｔｔｐｓ：／／ｅｘａｍｐｌｅ．ｃｏｍ
𠮷野家の牛丼
𩸽の塩焼き
𪚥 𠀀 𠀁 𡈽 𤭢 𫝆 𰀀 𱍐
⺀⺁⺂ ⼀⼁⼂ 豈更車
㊀㊁㊂ ㊙㊗ ㈱ ㍿
ㄅㄆㄇㄈ 注音符號
〒100-0001 東京都千代田区千代田1-1
第１章　はじめに
""")


def gen_cjk():
    addall("cjk", CJK)
    han = [chr(c) for c in range(0x4E00, 0x9FA6)]
    hira = [chr(c) for c in range(0x3041, 0x3097)]
    kata = [chr(c) for c in range(0x30A1, 0x30FB)]
    hangul = [chr(c) for c in range(0xAC00, 0xD7A4)]
    punct = list("。、！？「」『』（）・ー…〜：；，")
    for _ in range(45):
        k = R.randint(2, 3)
        add("cjk", pick(["", "\n", " "]).join(pick(CJK) for _ in range(k)))
    for _ in range(50):
        pools = [han, hira, kata, hangul, punct]
        out = "".join(pick(pick(pools)) for _ in range(R.randint(3, 40)))
        add("cjk", out)
    for s in SENTENCES[:30]:
        add("cjk", fullwidth(s))


# ---------------------------------------------------------------------------
# 9. Emoji
# ---------------------------------------------------------------------------

def zwj(*parts):
    return ZWJ.join(parts)


EMOJI_SINGLE = list("😀😂🤣😍😎😭😡🤔🙄😴🤖👻💩👍👎🙏👏💪🔥✨🎉🚀🌍🐍🦀🐧🍕🍣🎵💯✅❌⭐⚡☕💡📦🧠🫠🫨🩷🩵🩶🫎🫏🪽🪼🫛🫚🪭🪮🪇🪈🛜🥹🫶")
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
EMOJI_SEQ = [
    zwj("👨", "👩", "👧"), zwj("👨", "👩", "👧", "👦"), zwj("👩", "💻"), zwj("🧑", "🚀"),
    zwj("🏳" + VS16, "🌈"), zwj("🏴", "☠" + VS16), zwj("👁" + VS16, "🗨" + VS16),
    zwj("❤" + VS16, "🔥"), zwj("🐻", "❄" + VS16), zwj("🐦", "⬛"),
    zwj("🧑🏽", "🤝", "🧑🏻"), zwj("👩🏾", "❤" + VS16, "💋", "👨🏼"), zwj("🏃", "♀" + VS16),
    zwj("🙂", "↔" + VS16), zwj("👨", "🦰"), zwj("👩🏿", "🔬"),
    "🇫🇷", "🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "🇮🇳", "🇬🇧", "🇺🇦", "🇪🇺", "🇺🇳",
    "🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",
    "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
    "1" + VS16 + KEYCAP, "#" + VS16 + KEYCAP, "*" + VS16 + KEYCAP, "0" + KEYCAP, "🔟",
    "☺" + VS15, "☺" + VS16, "✌" + VS15, "✌" + VS16, "♥" + VS15, "♥" + VS16,
    "©" + VS16, "®" + VS16, "™" + VS16, "↔" + VS16, "❤", "❤" + VS16, "⚠" + VS16,
] + ["👍" + s for s in SKIN] + ["👋" + s for s in SKIN]


def gen_emoji():
    allem = EMOJI_SINGLE + EMOJI_SEQ
    for e in EMOJI_SEQ:
        add("emoji", e)
    for i in range(0, len(EMOJI_SINGLE), 6):
        add("emoji", "".join(EMOJI_SINGLE[i:i + 6]))
    add("emoji", "".join(EMOJI_SEQ))
    for _ in range(100):
        kind = R.randrange(4)
        if kind == 0:
            out = "".join(pick(allem) for _ in range(R.randint(1, 8)))
        elif kind == 1:
            out = pick(SENTENCES) + pick([" ", "", "  "]) + "".join(pick(allem) for _ in range(R.randint(1, 4)))
        elif kind == 2:
            out = " ".join(pick(allem) for _ in range(R.randint(2, 10)))
        else:
            ws = pick(WORDS)
            out = pick(allem) + ws + pick(allem) + pick(["!", "?!", "...", ""]) + pick(allem)
        add("emoji", out)
    add("emoji", "I ❤️ NY 🗽 — 5⭐️ rating!!! 👍🏽👍🏽👍🏽")
    add("emoji", "Status: ✅ passed, ❌ failed, ⚠️ warnings: 3")
    add("emoji", "🙂🙃🙂🙃🙂🙃🙂🙃🙂🙃🙂🙃")
    add("emoji", "😀" * 40)


# ---------------------------------------------------------------------------
# 10. Combining marks
# ---------------------------------------------------------------------------

def gen_combining(ucd):
    fixed = [
        "cafe\u0301", "nai\u0308ve", "Zoe\u0308", "resume\u0301", "Cre\u0300me bru\u0302le\u0301e",
        "a\u0300\u0301\u0302\u0303\u0304", "e\u0323\u0302", "\u0301", "\u0301a", " \u0301a", "a \u0301 b",
        "1\u20e3", "5\u0338", "=\u0338", "x\u0305", "A\u20dd", "B\u20de", "\u20dd", "\u0488\u0489",
        "Д\u0488", "!\u0301", "'s\u0301", "'\u0301s", "😀\u0301", "日\u0301本", "q\u0307\u0323",
        "a\u034fb", "a\u200db", "a\u200cb", "a\ufe00", "葛\U000E0100", "葛\U000E0101 辻\U000E0100",
        "o\u031b\u0300", "i\u0307", "I\u0307stanbul", "n\u0303", "N\u0303",
        "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u116e\u11af", "\u115f\u1160", "\u3164",
        "\ua960\u1161\ud7b0", "\u1100\u1161 \u1102\u1161", "ก่้๊๋", "क्षि", "கொ", "ে\u09be",
        "x\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b\u030c\u030d\u030e\u030f",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0300\u0350\u036c\u0350\u0300",
    ]
    addall("combining", fixed)
    for s in LATIN + SENTENCES[:10]:
        n = unicodedata.normalize("NFD", s)
        if n != s or R.random() < 0.1:
            add("combining", n)
    for s in SCRIPTS[:7] + CJK[21:26]:
        add("combining", unicodedata.normalize("NFD", s))
    marks = [c for c in ucd.with_gc({"Mn", "Me"})
             if 0x300 <= c <= 0x36F or 0x483 <= c <= 0x489 or 0x1AB0 <= c <= 0x1AFF
             or 0x1DC0 <= c <= 0x1DFF or 0x20D0 <= c <= 0x20FF or 0xFE20 <= c <= 0xFE2F]
    allmarks = ucd.with_gc({"Mn", "Mc", "Me"})
    for _ in range(45):  # Zalgo-like
        base = pick(SENTENCES)[:R.randint(5, 40)]
        out = []
        for c in base:
            out.append(c)
            for _ in range(R.randint(0, 6)):
                out.append(chr(pick(marks)))
        add("combining", "".join(out))
    for _ in range(30):  # arbitrary marks (any script) after arbitrary bases
        out = []
        for _ in range(R.randint(2, 12)):
            out.append(pick(["a", "Z", " ", "1", ".", "'", "é", "ж", "中", "\n", "😀", "_"]))
            for _ in range(R.randint(1, 3)):
                out.append(chr(pick(allmarks)))
        add("combining", "".join(out))
    for _ in range(25):  # conjoining Hangul jamo sequences
        out = []
        for _ in range(R.randint(1, 8)):
            out.append(chr(0x1100 + R.randrange(19)) + chr(0x1161 + R.randrange(21)))
            if R.random() < 0.6:
                out.append(chr(0x11A8 + R.randrange(27)))
            if R.random() < 0.2:
                out.append(" ")
        add("combining", "".join(out))


# ---------------------------------------------------------------------------
# 11. Math and symbols
# ---------------------------------------------------------------------------

SYMBOLS = lines("""
∑_{i=1}^{n} i² = n(n+1)/2
∫₀^∞ e^{-x²} dx = √π/2
∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−f(a)|<ε
a ≤ b ≥ c ≠ d ≈ e ≡ f
x ∈ ℝ, n ∈ ℕ, z ∈ ℂ, q ∈ ℚ, k ∈ ℤ
A ∩ B ⊆ A ∪ B
¬(p ∧ q) ⇔ ¬p ∨ ¬q
→ ← ↑ ↓ ↔ ⇒ ⇐ ⟶ ↦
© 2024 Example Corp. All rights reserved™ ®
½ + ¼ = ¾
x² + y² = r²
H₂O, CO₂, C₆H₁₂O₆
Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅰⅱⅲ ↀↁↂ
①②③④⑤ ⑩ ⑳ ⓐⓑⓒ
𝔄𝔅ℭ 𝕏𝕐ℤ 𝐀𝐁𝐂 𝑎𝑏𝑐 𝟎𝟏𝟐𝟗 𝟘𝟙𝟚
°C °F ‰ ‱ ′ ″ ‴
∞ ∅ ∇ ∂ ∆ ∏ ∐
⊕ ⊗ ⊥ ∥ ∠ ∡
♠ ♣ ♥ ♦ ♤ ♧
♩ ♪ ♫ ♬ ♭ ♮ ♯
♔♕♖♗♘♙ ♚♛♜♝♞♟
☀ ☁ ☂ ☃ ★ ☆
✓ ✔ ✗ ✘
←─┼─→ ┌──┐ │ ├┤ └──┘ ═ ║ ╔╗╚╝
░▒▓█ ▀▄▌▐
■□▪▫▲△▼▽◆◇○●
λx.x ∘ f ⊢ φ → ψ
ℏ = h/2π ≈ 1.055×10⁻³⁴ J·s
E = mc²
Δx·Δp ≥ ℏ/2
¬ ¦ § ¶ · ¸ ¨ ¯ ´ ˆ ˜
‽ ⁂ ※ † ‡ • ‣ ⁃
№ ℅ ℓ ℮ ℞ ℗ ℠
⌘ ⌥ ⇧ ⌃ ⎋ ⏎ ⌫
⟨a|b⟩ ⟦x⟧ ⌈x⌉ ⌊x⌋
∛8 = 2, ∜16 = 2
≪ ≫ ≲ ≳ ≺ ≻
∮ ∯ ∰ ∱ ∲
𝛼𝛽𝛾 𝜶𝜷𝜸
₀₁₂₃₄₅₆₇₈₉ ⁰¹²³⁴⁵⁶⁷⁸⁹ ⁺⁻⁼⁽⁾
¼ ½ ¾ ⅐ ⅑ ⅒ ⅓ ⅔ ⅕ ⅛ ↉
$ ¢ £ ¤ ¥ ₠ ₡ ₢ ₣ ₤ ₥ ₦ ₧ ₨ ₩ ₪ ₫ € ₭ ₮ ₯ ₰ ₱ ₲ ₳ ₴ ₵ ₶ ₷ ₸ ₹ ₺ ₻ ₼ ₽ ₾ ₿ ⃀
3 × 4 ÷ 2 ± 1 ∓ 0
f: X → Y, g ∘ f, f⁻¹(y)
P(A|B) = P(B|A)·P(A) / P(B)
σ² = (1/N) ∑ (xᵢ − μ)²
⌀12mm, 90°, 45′, 30″
""")


def gen_symbols(ucd):
    addall("symbols", SYMBOLS)
    syms = ucd.with_gc({"Sm", "So", "Sc", "Sk"})
    nums = ucd.with_gc({"No", "Nl"})
    for _ in range(50):
        out = "".join(chr(pick(syms)) for _ in range(R.randint(1, 20)))
        if R.random() < 0.3:
            out = " ".join(out)
        add("symbols", out)
    for _ in range(20):
        out = "".join(pick([chr(pick(syms)), chr(pick(nums)), pick("xyz0123456789+-=() ")]) for _ in range(R.randint(3, 25)))
        add("symbols", out)


# ---------------------------------------------------------------------------
# 12. Mixed script
# ---------------------------------------------------------------------------

MIXED_FIXED = lines("""
iPhone 15 Pro Max — 256GB — ¥159,800（税込）
Москва2024
αβγABCабв
東京Tokyo東京
C++とPythonで開発
Café Müller & Søn’s Ωmega
ÆØÅ æøå
日本語English한국어Русский
データ123テスト
ID: ١٢٣٤ / ۱۲۳۴ / १२३४ / ๑๒๓๔ / １２３４
Ⅻ時
pаypal.com
Hello שלום World مرحبا
abc\u202edef\u202c ghi
\u200fRTL mark\u200e LTR mark
\u2066isolate\u2069 \u2067rtl\u2069 \u2068first\u2069
x1y2z3
abc123def456
v1.0版本
2024年3月5日
3DプリンターとAIチップ
GPT-2のトークナイザー
ĀB̄C̄ and Ꭺ (Cherokee A) vs A (Latin A) vs Α (Greek Alpha) vs А (Cyrillic A)
ﬁ ﬂ ﬀ ﬃ ﬄ ligatures
ǅ ǈ ǋ ǲ titlecase digraphs
ʰʲʷ ˠˤ ᵃᵇᶜ modifier letters
""")


def gen_mixed():
    addall("mixed_script", MIXED_FIXED)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘ",
        "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗ",
        "אבגדהוזחטיכלמנסעפצקרשת",
        "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह",
        "กขคงจฉชซญดตถทธนบปผพภมยรลวศษสหอฮ",
        "中文字符测试日本語漢字",
        "あいうえおかきくけこアイウエオカキクケコ",
        "가나다라마바사아자차카타파하",
        "0123456789",
        "٠١٢٣٤٥٦٧٨٩",
        "०१२३४५६७८९",
        "０１２３４５６７８９",
        "²³¹¼½¾ⅠⅡⅢ①②③",
        "!?.,;:-_'\"()[]{}",
        "éèêëàâäôöûüçñß",
    ]
    for _ in range(100):
        out = []
        for _ in range(R.randint(2, 7)):
            pool = pick(pools)
            out.append("".join(R.choice(pool) for _ in range(R.randint(1, 8))))
        add("mixed_script", pick(["", " ", "", "-", "_", "."]).join(out))


# ---------------------------------------------------------------------------
# 13. Long words
# ---------------------------------------------------------------------------

LONG_FIXED = [
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "antidisestablishmentarianism",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
    "Llanfairpwllgwyngyllgogerychwyndrobwllllantysiliogogogoch",
    "supercalifragilisticexpialidocious",
    "Lentokonesuihkuturbiinimoottoriapumekaanikkoaliupseerioppilas",
    "Muvaffakiyetsizleştiricileştiriveremeyebileceklerimizdenmişsinizcesine",
    "Taumatawhakatangihangakoauauotamateaturipukakapikimaungahoronukupokaiwhenuakitanatahu",
    "honorificabilitudinitatibus",
    "floccinaucinihilipilification",
    "ΛΟΠΑΔΟΤΕΜΑΧΟΣΕΛΑΧΟΓΑΛΕΟΚΡΑΝΙΟΛΕΙΨΑΝΟΔΡΙΜΥΠΟΤΡΙΜΜΑΤΟΣΙΛΦΙΟΠΑΡΑΟΜΕΛΙΤΟΚΑΤΑΚΕΧΥΜΕΝΟΚΙΧΛΕΠΙΚΟΣΣΥΦΟΦΑΤΤΟΠΕΡΙΣΤΕΡΑΛΕΚΤΡΥΟΝΟΠΤΟΚΕΦΑΛΛΙΟΚΙΓΚΛΟΠΕΛΕΙΟΛΑΓΩΟΣΙΡΑΙΟΒΑΦΗΤΡΑΓΑΝΟΠΤΕΡΥΓΩΝ",
    "превысокомногорассмотрительствующий",
    "getElementsByTagNameNSWithCallbackAndOptionalTimeoutInMilliseconds",
    "this_is_a_very_long_snake_case_identifier_that_keeps_going_and_going",
    "THIS_IS_A_SCREAMING_SNAKE_CASE_CONSTANT_NAME_FOR_MAXIMUM_BUFFER_LENGTH",
    "kebab-case-is-also-quite-common-in-urls-and-css-class-names-everywhere",
    "AbstractSingletonProxyFactoryBeanDefinitionRegistryPostProcessorAdapter",
]


def gen_long():
    addall("long_words", LONG_FIXED)
    alpha = "abcdefghijklmnopqrstuvwxyz"
    b64 = alpha + alpha.upper() + "0123456789+/"
    for n in (50, 100, 200, 399):
        add("long_words", "a" * n)
        add("long_words", "ab" * (n // 2))
        add("long_words", "".join(R.choice(alpha) for _ in range(n)))
        add("long_words", "".join(R.choice(alpha + alpha.upper()) for _ in range(n)))
        add("long_words", "".join(R.choice("0123456789") for _ in range(n)))
    for _ in range(12):
        add("long_words", "".join(R.choice(b64) for _ in range(R.randint(40, 300))) + pick(["", "=", "=="]))
        add("long_words", "".join(R.choice("0123456789abcdef") for _ in range(R.randint(32, 128))))
    add("long_words", "1234567890" * 39)
    add("long_words", "é" * 150)
    add("long_words", "e\u0301" * 100)
    add("long_words", "ж" * 200)
    add("long_words", "中" * 200)
    add("long_words", "".join(chr(R.randint(0x4E00, 0x9FA5)) for _ in range(300)))
    add("long_words", "".join(chr(R.randint(0x430, 0x44F)) for _ in range(150)))
    add("long_words", "".join(chr(R.randint(0x3B1, 0x3C9)) for _ in range(150)))
    add("long_words", "".join(chr(R.randint(0xAC00, 0xD7A3)) for _ in range(120)))
    add("long_words", "ğüşöçıİĞÜŞÖÇ" * 20)
    add("long_words", " " + "x" * 300)
    add("long_words", "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo")
    add("long_words", "na" * 16 + " Batman!")
    add("long_words", "".join(pick(["ab", "ba", "aab", "bba", "the", "ing", "tion", "ly"]) for _ in range(80)))
    for _ in range(10):
        w = "".join(R.choice(alpha) for _ in range(R.randint(20, 60)))
        add("long_words", "%s %s %s" % (pick(SENTENCES)[:-1], w, pick(["and more.", "!", "..."])))


# ---------------------------------------------------------------------------
# 14. Repeated / unusual punctuation
# ---------------------------------------------------------------------------

PUNCT_FIXED = lines("""
!!!???
?!?!?!
!!!!!!!!!!!!!!!!
????????
----
--------------------------------
====
==========================================
....
..........
~~~~
~~~~~~~~~~~~
****
#####
$$$$
%%%%
&&&&
@@@@
^^^^
____
++++
||||
////
<<<<>>>>
((((()))))
[[[[]]]]
{{{{}}}}
,,,,
,,,,,,,,,,,,
;;;;
::::
""\u201c\u201d
''''
``````
```python
...?!
?...
!?
‽‽‽
…………
————
––––
·····
•••
«««»»»
¡¡¡Hola!!!
¿¿¿Qué???
Wait, what?!?!
Hmm....... okay.
-- end of message --
== Section ==
** bold **
__init__
<!-- -->
/* */
// ---
#!/bin/sh
->
=>
<=>
!==
===
:=
::
...
!= == <= >= << >> ** // %% &&
,,,""''
),
',
",
,',
,",
,,.
.,.,.,
,;,;,
'",'",
"',"',
(,)
[,]
{,}
a,,b
,a,
1,,,2
""")


def gen_punct():
    addall("punctuation", PUNCT_FIXED)
    ascii_p = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    uni_p = "“”‘’«»„‚‹›¿¡…—–·•¶§†‡※‽⁂〈〉【】《》「」、。・"
    for _ in range(90):
        pool = pick([ascii_p, ascii_p, ",.'\"", ",,,'\"()", uni_p, ascii_p + uni_p])
        out = "".join(R.choice(pool) for _ in range(R.randint(2, 40)))
        if R.random() < 0.3:
            i = R.randrange(len(out) + 1)
            out = out[:i] + pick([" ", "  ", "a", "the", "1", "\n"]) + out[i:]
        if R.random() < 0.2:
            out = " " + out
        add("punctuation", out)
    for ch in ascii_p:
        add("punctuation", ch * R.randint(2, 24))
        add("punctuation", " " + ch * R.randint(2, 8) + " word")


# ---------------------------------------------------------------------------
# 15. URLs and e-mails
# ---------------------------------------------------------------------------

def gen_urls():
    fixed = lines("""
https://www.example.com/
http://example.org/path/to/page.html?query=1&lang=en#section-2
https://sub.domain.co.uk:8443/a/b/c?x=%20y%E2%9C%93&z=
ftp://ftp.example.net/pub/file.tar.gz
ws://localhost:8080/socket
file:///home/user/Documents/report%20final.pdf
mailto:someone@example.com?subject=Hello%20there
https://xn--bcher-kva.example/
https://bücher.de/straße
https://例子.测试/路径?查询=值
http://127.0.0.1:5000/api/v1/users/42
http://[::1]:3000/
https://user:p@ss@example.com/secret
https://github.com/openai/gpt-2/blob/master/src/encoder.py#L53
https://en.wikipedia.org/wiki/Byte_pair_encoding
https://example.com/search?q=hello+world&page=2&sort=desc
<https://example.com/angle-brackets>
(see https://example.com/parens)
john.doe@example.com
first.last+tag@sub.example.co.uk
"quoted name"@example.com
user_name-123@mail-server.net
admin@localhost
Contact us at support@example.com or visit https://example.com/help.
Email: JOHN@EXAMPLE.COM, Phone: +1-800-555-0199
ümlaut@bücher.de
用户@例子.广告
""")
    addall("urls_emails", fixed)
    schemes = ["http://", "https://", "https://", "ftp://", "", "www."]
    hosts = ["example.com", "example.org", "api.example.io", "cdn.static-files.net", "localhost:8080",
             "10.0.0.1", "my-site.co.uk", "docs.python.org", "news.ycombinator.com", "a.b.c.d.e"]
    segs = ["index.html", "api", "v2", "users", "42", "search", "static", "img", "logo.png",
            "2024", "03", "blog", "post-title-here", "~user", "%E2%82%AC", "a_b-c.d", "README.md"]
    names = ["john", "jane.doe", "j.smith", "info", "no-reply", "user+filter", "x_y_z", "bob99", "ALICE"]
    for _ in range(75):
        if R.random() < 0.65:
            u = pick(schemes) + pick(hosts) + "".join("/" + pick(segs) for _ in range(R.randint(0, 4)))
            if R.random() < 0.4:
                u += "?" + "&".join("%s=%s" % (pick(["q", "id", "page", "utm_source", "ref", "lang"]),
                                                 pick(["1", "abc", "hello+world", "%20", "", "en-US"]))
                                     for _ in range(R.randint(1, 3)))
            if R.random() < 0.2:
                u += "#" + pick(["top", "section-3", "L10-L20", ""])
        else:
            u = pick(names) + "@" + pick(hosts).split(":")[0]
        if R.random() < 0.4:
            u = pick(["Visit ", "See: ", "Link: ", "Email me at ", "(", "<", "[docs](", "Go to "]) + u + pick(["", ".", ")", ">", " now!", ", thanks"])
        add("urls_emails", u)


# ---------------------------------------------------------------------------
# 16. Markdown
# ---------------------------------------------------------------------------

MD_BLOCKS = [
    "# Heading One", "## Heading Two", "### Heading *three*", "#### H4 with `code`",
    "Setext heading\n==============", "Another one\n-----------",
    "- item one\n- item two\n  - nested item\n- item three",
    "* star item\n* another\n\n1. first\n2. second\n3. third",
    "- [ ] todo\n- [x] done\n- [X] also done",
    "**bold** and __bold__, *italic* and _italic_, ***both***, ~~strike~~",
    "Inline `code` and ``code with ` backtick``.",
    "```python\ndef hello():\n    print(\"hi\")\n```",
    "```\nplain fenced block\n```",
    "~~~js\nconst x = 1;\n~~~",
    "    indented code block\n    second line",
    "> A blockquote\n> spanning two lines\n>\n> > nested quote",
    "[link text](https://example.com \"title\") and ![alt text](img/cat.png)",
    "[ref link][1]\n\n[1]: https://example.com/ref",
    "| Column A | Column B | C |\n|:---------|---------:|:-:|\n| a1       |       b1 | c |\n| a2       |       b2 | d |",
    "---", "***", "___",
    "Footnote reference[^1].\n\n[^1]: The footnote text.",
    "<details>\n<summary>Click</summary>\n\nHidden *markdown*.\n</details>",
    "Line with two trailing spaces  \nforces a break.",
    "Escaped \\*asterisks\\* and \\_underscores\\_ and \\# hash",
    "$$E = mc^2$$ and inline $a^2 + b^2 = c^2$",
    "Term\n: Definition of the term",
    "1) paren list\n2) second\n10) tenth",
    "<kbd>Ctrl</kbd>+<kbd>C</kbd>",
    "@mention #123 :smile: :+1:",
]


def gen_markdown():
    addall("markdown", MD_BLOCKS)
    for _ in range(60):
        k = R.randint(2, 4)
        parts = [pick(MD_BLOCKS + SENTENCES[:40]) for _ in range(k)]
        add("markdown", "\n\n".join(parts) if R.random() < 0.7 else "\n".join(parts))


# ---------------------------------------------------------------------------
# 17. Edge cases: <|endoftext|>, single characters, controls, specials
# ---------------------------------------------------------------------------

def gen_edge():
    eot = "<|endoftext|>"
    addall("edge", [
        eot, " " + eot, eot + " ", eot + eot, eot + "\n" + eot,
        "Hello world" + eot + "Next document begins here.",
        "The end.\n" + eot + "\nChapter 1",
        "<|endoftext|> is the GPT-2 end-of-text marker; here it is plain text.",
        "<|endoftext", "endoftext|>", "<|im_start|>user\nhi<|im_end|>", "< | endoftext | >",
        "<|ENDOFTEXT|>", "<|endoftext|>" * 5,
    ])
    for o in range(0x20, 0x7F):  # every printable ASCII char alone
        add("edge", chr(o))
    for o in list(range(0x01, 0x20)) + [0x7F] + list(range(0x80, 0xA0)):  # controls (no NUL)
        add("edge", "a" + chr(o) + "b")
        if R.random() < 0.3:
            add("edge", chr(o))
    specials = [0xFEFF, 0xFFFD, 0xFFFC, 0x00AD, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2060,
                0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x2069, 0x180E, 0x0085, 0x034F, 0x115F,
                0x3164, 0xFFA0, 0x2800, 0xE000, 0xF8FF, 0xF0000, 0x10FFFD, 0xE0001, 0x1D173,
                0xFFF9, 0xFFFA, 0xFFFB, 0x061C, 0x2028, 0x2029, 0x00A0, 0x1680, 0x202F, 0x3000]
    for cp in specials:
        c = chr(cp)
        add("edge", c)
        add("edge", "word" + c + "word")
        add("edge", " " + c + " x")
    for _ in range(40):
        add("edge", "".join(chr(R.randint(0x20, 0x7E)) for _ in range(R.randint(2, 4))))
    for a in [" ", "\n", "\t", "'", "s"]:
        for b in [" ", "\n", "\t", "'", "s", "1", "é"]:
            add("edge", a + b)


# ---------------------------------------------------------------------------
# 18. Unicode sweeps (coverage of the 15.0 category tables)
# ---------------------------------------------------------------------------

def gen_sweep(ucd):
    spread = ucd.assigned_list(per_range=64, skip=("Cs", "Co", "Cc"))
    for _ in range(170):
        i = R.randrange(len(spread))
        n = R.randint(8, 50)
        run = [chr(c) for c in spread[i:i + n]]
        if R.random() < 0.4:
            run = [c + (" " if R.random() < 0.3 else "") for c in run]
        add("unicode_sweep", "".join(run))
    for _ in range(50):  # random assigned code points, anywhere (incl. big ranges)
        out = []
        for _ in range(R.randint(3, 30)):
            k = R.randrange(len(ucd.starts))
            if ucd.gcs[k] in ("Cs", "Cc"):
                continue
            out.append(chr(R.randint(ucd.starts[k], ucd.ends[k])))
            if R.random() < 0.2:
                out.append(pick([" ", "a", "1", "'s", "\n", "  "]))
        add("unicode_sweep", "".join(out))
    # every code point of the classes where L / N / \s decisions are subtle
    for gcset, step in ((("Nd",), 48), (("Nl",), 48), (("No",), 48), (("Lt",), 40),
                        (("Lm",), 48), (("Me",), 20), (("Pc", "Pd"), 40), (("Pi", "Pf"), 30),
                        (("Sc",), 70)):
        cps = ucd.with_gc(set(gcset))
        for i in range(0, len(cps), step):
            add("unicode_sweep", "".join(chr(c) for c in cps[i:i + step]))
    zs = [chr(c) for c in ucd.with_gc({"Zs", "Zl", "Zp"})]
    add("unicode_sweep", "".join(zs))
    add("unicode_sweep", "x".join(zs))
    add("unicode_sweep", " a".join(zs))
    cf = [chr(c) for c in ucd.with_gc({"Cf"}) if c < 0xE0000]
    add("unicode_sweep", "a".join(cf[:80]))
    add("unicode_sweep", "a".join(cf[80:]))


# ---------------------------------------------------------------------------
# 19. Random fuzz mixtures
# ---------------------------------------------------------------------------

def gen_fuzz(ucd):
    letters = ucd.with_gc({"Lu", "Ll", "Lt", "Lm"})
    fragments = (["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s", "'"] + WS_POOL
                 + WORDS + list("abcXYZ0123456789.,!?;:-()[]{}\"'/\\") + EMOJI_SINGLE[:12]
                 + ["\u0301", "\u0308", "é", "ß", "ж", "λ", "中", "あ", "한", "١", "५", "²", "½", "Ⅻ"])
    for _ in range(130):
        out = []
        for _ in range(R.randint(2, 30)):
            if R.random() < 0.1:
                out.append(chr(pick(letters)))
            else:
                out.append(pick(fragments))
        add("fuzz", "".join(out))


# ---------------------------------------------------------------------------
# 20. Leading / trailing whitespace variants of earlier cases
# ---------------------------------------------------------------------------

def gen_edges_spaces():
    base = [s for c, s in CASES if c in ("prose", "code", "latin_accented", "scripts", "cjk",
                                           "emoji", "numbers", "symbols", "mixed_script")]
    for _ in range(140):
        s = pick(base)
        pre = pick(["", " ", "  ", "   ", "\n", "\t", " \n", "\u00a0"])
        post = pick(["", " ", "  ", "\n", "\n\n", "\t", " \n", "\r\n"])
        if not pre and not post:
            pre = " "
        add("leading_trailing_ws", pre + s[:MAX_LEN - 4] + post)


# ---------------------------------------------------------------------------
# Validation and output
# ---------------------------------------------------------------------------

ESCAPE_GCS = ("Cc", "Zl", "Zp", "Zs", "Cf")


def to_line(s, ucd):
    out = json.dumps(s, ensure_ascii=False)
    res = []
    for c in out:
        o = ord(c)
        if o >= 0x80 and o <= 0xFFFF and o not in (0x200C, 0x200D) and ucd.gc(o) in ESCAPE_GCS:
            res.append("\\u%04x" % o)
        elif o == 0x7F:
            res.append("\\u007f")
        else:
            res.append(c)
    line = "".join(res)
    if json.loads(line) != s:
        die("internal: escaping does not round-trip for %r" % s)
    return line


def validate(cases, ucd):
    errors = []
    for idx, (cat, s) in enumerate(cases):
        if not (1 <= len(s) <= MAX_LEN):
            errors.append("case %d (%s): length %d out of range" % (idx, cat, len(s)))
        for pos, c in enumerate(s):
            o = ord(c)
            if o == 0:
                errors.append("case %d (%s): NUL at %d" % (idx, cat, pos))
            elif 0xD800 <= o <= 0xDFFF:
                errors.append("case %d (%s): surrogate U+%04X at %d" % (idx, cat, o, pos))
            elif ucd.gc(o) is None:
                errors.append("case %d (%s): U+%04X at %d is unassigned in Unicode 15.0 UnicodeData.txt: %r"
                              % (idx, cat, o, pos, s[:60]))
    if errors:
        die("%d invalid code point(s)/case(s):\n  " % len(errors) + "\n  ".join(errors[:50]))


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = os.path.join(here, "corpus.jsonl")
    ucd_path = UCD_DEFAULT
    args = list(argv[1:])
    while args:
        a = args.pop(0)
        if a == "--ucd" and args:
            ucd_path = args.pop(0)
        elif a.startswith("-"):
            die("usage: make_corpus.py [OUT.jsonl] [--ucd UnicodeData.txt]")
        else:
            out_path = a
    ucd = UCD(ucd_path)

    gen_prose()
    gen_code()
    gen_numbers()
    gen_whitespace()
    gen_contractions()
    gen_latin()
    gen_scripts()
    gen_cjk()
    gen_emoji()
    gen_combining(ucd)
    gen_symbols(ucd)
    gen_mixed()
    gen_long()
    gen_punct()
    gen_urls()
    gen_markdown()
    gen_edge()
    gen_sweep(ucd)
    gen_fuzz(ucd)
    gen_edges_spaces()

    validate(CASES, ucd)

    seen = set()
    final = []
    for cat, s in CASES:
        if s in seen:
            continue
        seen.add(s)
        final.append((cat, s))
    if len(final) < MIN_LINES:
        die("only %d unique cases (need >= %d)" % (len(final), MIN_LINES))

    text = "".join(to_line(s, ucd) + "\n" for _, s in final)
    data = text.encode("utf-8")
    if len(data) > MAX_BYTES:
        die("corpus is %d bytes (limit %d)" % (len(data), MAX_BYTES))
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, out_path)

    # statistics
    cats = []
    counts = {}
    for cat, _ in final:
        if cat not in counts:
            cats.append(cat)
            counts[cat] = 0
        counts[cat] += 1

    def has_mark(s):
        return any(ucd.gc(ord(c)) in ("Mn", "Mc", "Me") for c in s)

    w = sys.stderr.write
    w("wrote %s: %d lines, %d bytes\n" % (out_path, len(final), len(data)))
    w("lines per category:\n")
    for cat in cats:
        w("  %-20s %5d\n" % (cat, counts[cat]))
    w("total characters (code points): %d\n" % sum(len(s) for _, s in final))
    w("cases with non-BMP characters:  %d\n" % sum(1 for _, s in final if any(ord(c) > 0xFFFF for c in s)))
    w("cases with combining marks:     %d\n" % sum(1 for _, s in final if has_mark(s)))
    w("cases with \\r:                  %d\n" % sum(1 for _, s in final if "\r" in s))
    w("cases with U+00A0:              %d\n" % sum(1 for _, s in final if "\u00a0" in s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
