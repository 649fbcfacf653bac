"""Reading a feedback page as a student does: its table of contents as plain text."""

import html
import re


def plain(fragment: str) -> str:
    """An HTML fragment's text, tags dropped, entities read, spaces collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()


def contents(page_html: str) -> list[str]:
    """The entries of a feedback page's table of contents, 'heading · entry' for those grouped under an exercise
    heading (the page shows the heading once, over them)."""
    toc = re.search(r'<div id="toc">(.*?)</div>', page_html, re.S).group(1)
    entries = []
    for group in re.finditer(r'<li class="exercise">(.*?)<ul>(.*?)</ul></li>|<li[^>]*>(.*?)</li>', toc, re.S):
        if group.group(3) is not None:
            entries.append(plain(group.group(3)))
        else:
            heading = plain(group.group(1))
            entries += [f"{heading} · {plain(li)}" for li in re.findall(r"<li>(.*?)</li>", group.group(2), re.S)]
    return entries
