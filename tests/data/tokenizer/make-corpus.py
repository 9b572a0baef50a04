#!/usr/bin/env python3
"""make-corpus.py - writes pre-corpus.inp, the texts every pre-tokenizer and
the Gemma 3 vocabulary are checked on (see README.md).  The texts are
written here with escapes so that each byte is deliberate; the .inp format
is llama.cpp's: each text followed by a line __ggml_vocab_test__.
"""
import os

TEXTS = [
    "Hello world",
    " Hello world",
    "Hello World! How are you today?",
    "I'm sure you'll see it's what they've DONE; we'd said 'Quote' and IT'S fine. She'S HE'LL we'RE",
    "don't DON'T Don'T can't won\u2019t o'clock 's 't",
    "a  b   c    d\t\te\t \tf     g",
    "   leading and trailing   ",
    "line1\nline2\r\nline3\rline4\n\n\nline5 \n \n  x",
    "\n\n\n",
    "\t\n \r\n\t x\n",
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0.5e-10 v1.2.3",
    "99999999999999999999 and 00001 x9 9x a1b22c333d4444",
    "\u0663\u0664\u0665 \u0661\u0662\u0663\u0664 \uff11\uff12\uff13\uff14\uff15 \u00b2\u00b3 \u00bd \u2167",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u4e2d\u6587\u5b57\u7b26\u548cEnglish\u6df7\u5408\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u3002\uff8a\uff9d\uff76\uff78\uff76\uff85",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \u3131\u3134\u3137 \u3105\u3106",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0647\u0630\u0627 \u0627\u062e\u062a\u0628\u0627\u0631. \u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645\u061f",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e\u0964 \u092f\u0939 \u090f\u0915 \u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0939\u0948\u0964",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e19\u0e35\u0e48\u0e04\u0e37\u0e2d\u0e01\u0e32\u0e23\u0e17\u0e14\u0e2a\u0e2d\u0e1a",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u041c\u0418\u0420! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u039a\u0395\u03a6\u0391\u039b\u0391\u0399\u0391 \u03ba\u03b1\u03b9 \u03bc\u03b9\u03ba\u03c1\u03ac. \u00c9COLE \u00c9cole",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 Zo\u00eb e\u0301 n\u0303 A\u030a \u00c5",
    "Stra\u00dfe \u0130stanbul \u0131i \u01c5emal \u01c8 \u00c0\u00c9\u00ce\u00d5\u00dc",
    "def foo(x, y=10):\n    return x**2 + y  # comment\n\nprint(foo(3))\n",
    "int main(void) {\n\tprintf(\"%d\\n\", a[i] >> 2 & 0xFF);\n\treturn 0;\n}\n",
    "{\"key\": [1, 2.5, true, null], \"s\": \"a\\\"b\"} => x?.y ?? z; `tmpl ${v}` // done",
    "!!! ??? ... --- === +++ ~~~ ^^^ $$$ ||| <<>> ``` ''' \"\"\" @#%&* ~a ~ ~/x",
    "\U0001f600\U0001f603 \U0001f44d\U0001f3fd \u2764\ufe0f \U0001f1fa\U0001f1f8 \U0001f3f3\ufe0f\u200d\U0001f308 \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f9d1\U0001f3ff\u200d\U0001f4bb 1\ufe0f\u20e3 \u00a9\u00ae\u2122",
    "I \u2764\ufe0f NY\U0001f5fd! ok\U0001f44cdone \U0001f602\U0001f602\U0001f602",
    "https://example.com/path?q=1&r=two#frag user.name+tag@example.org",
    "abc123def ABC123 \u03b1\u03b2\u03b3123 \u4e2d\u6587123 x\u00b2y\u00b3",
    "HTTPServerError getHTTPResponseCode XMLHttpRequest iPhone McDonald's \u00c9COLE \u00e9COLE Ab\u00c7",
    "<|endoftext|> <s> </s> [INST] <sentinel:12> IMGIMGABZ IMGIMGABCDEZ",
    "a\u00a0b\u2003c\u3000d\u200be\u2028f \u00a0\u00a0x",
    "tab\there\x0bvt\x0cff\x1fus\x7fdel",
    "supercalifragilisticexpialidocious Pneumonoultramicroscopicsilicovolcanoconiosis",
    "aaaaaaaaaaaaaaaaaaaa ________ ======== ........ \u2014\u2014\u2014\u2014",
    "\u2211(x\u00b2) \u2264 \u221e \u2192 \u2200x\u2208\u211d: \u221ax \u2260 \u22121 \u00b1 0.5",
    "$100 \u20ac50 \u00a330 \u00a51000 \u20b9500 \u20bf0.1",
    "\u201cdouble\u201d \u2018single\u2019 \u00abguillemets\u00bb \u201eGerman\u201c \u300c\u65e5\u672c\u300d \uff08\u62ec\u5f27\uff09",
    "  \n  \n\n    indented\n\t\ttabbed\n",
    "",
    " ",
    "a",
    "   ",
    "\uff21\uff22\uff23 \uff44\uff45\uff46\uff01\uff1f",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u: H\u00e0 N\u1ed9i, \u0110\u00e0 N\u1eb5ng",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u09e7\u09e8\u09e9 \u09ac\u09be\u0982\u09b2\u09be \u09e8\u09e6\u09e8\u09ea",
    "trailing\n\n",
    "\U0001faa8\U0001faf7\U0001faf8 \U0001fa77 \U0001fae8",
    "x" + " " * 40 + "y" + "\t" * 9 + "z",
    "\u2581already\u2581escaped \u2581",
    "mixed\r\n\r\nCRLF\r\rCR only\n\r",
    "don'tstop 123abc ABCdef GHI JKL's 1st 2nd 3rd",
]

SEP = "\n__ggml_vocab_test__\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "pre-corpus.inp"), "wb") as f:
        for t in TEXTS:
            f.write((t + SEP).encode("utf-8"))
    print(len(TEXTS), "texts")


if __name__ == "__main__":
    main()
