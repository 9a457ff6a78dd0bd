"""Placeholders: the parts of a program's message that the program fills in
or reads as markup, and that a translation must keep as they are.

    "Cannot open %s: %d errors"      printf's conversions (`%s`, `%-5d`, `%1$s`, `%lu`)
    "Copy %1 to %2"                  Qt's numbered arguments
    "%(name)s was saved"             Python's named conversions
    "Delete {count} files from {0}"  brace fields (Python, C#, ICU)
    "<b>Warning:</b> &quot;x&quot;"  XML/HTML tags and entities

`%%` (a literal percent sign) is not one. A translation keeps a message's
placeholders when it has the same ones, each as many times, in any order
(a language may need another word order).
"""

import collections
import re

PLACEHOLDER = re.compile(
    r"%(?:\d+\$)?[-+#0']*\d*(?:\.\d+)?[hlLqjzt]*[a-zA-Z]"  # %s, %-5d, %1$s, %lu
    r"|%\d+"  # %1
    r"|%\(\w+\)[a-zA-Z]"  # %(name)s
    r"|\{[\w.:]*\}"  # {0}, {name}, {0:.2f}
    r"|</?[a-zA-Z][\w-]*(?:\s[^<>]*)?/?>"  # <b>, </b>, <a href="...">, <br/>
    r"|&[a-zA-Z]+;|&#\d+;"  # &quot;, &#160;
)


def placeholders(text):
    """The placeholders of `text`, in order."""
    return PLACEHOLDER.findall(text)


def keeps_placeholders(source, translation):
    """Whether `translation` has `source`'s placeholders, each as many
    times (in any order)."""
    return collections.Counter(placeholders(source)) == collections.Counter(
        placeholders(translation)
    )


def placeholder_survival(sources, translations):
    """`{"pairs": N, "kept": K}`: of the N sources with a placeholder, K
    translations keep them all (`keeps_placeholders`)."""
    pairs = [
        (source, translation)
        for source, translation in zip(sources, translations, strict=True)
        if placeholders(source)
    ]
    kept = sum(keeps_placeholders(source, translation) for source, translation in pairs)
    return {"pairs": len(pairs), "kept": kept}


def frequent_placeholders(texts, at_least=3, most=200):
    """The placeholders found `at_least` times in `texts`, the most frequent
    first (at most `most`), leaving out those with a space (a tag's
    attributes): what a subword vocabulary keeps as one token each, so a
    model copies each placeholder as one token rather than as pieces."""
    counts = collections.Counter(p for text in texts for p in placeholders(text))
    return [
        placeholder
        for placeholder, count in counts.most_common(most)
        if count >= at_least and not any(c.isspace() for c in placeholder)
    ]
