"""Reading what test notebooks printed: one string per cell, as the sandbox and worker tests compare it."""


def cell_texts(nb) -> list[str]:
    """Each cell's stream text, an error as 'ERROR name', stripped ('' for a markdown cell)."""
    texts = []
    for cell in nb.cells:
        parts = [out.text if out.output_type == "stream" else f"ERROR {out.ename}"
                 for out in cell.get("outputs", []) if out.output_type in ("stream", "error")]
        texts.append("".join(parts).strip())
    return texts
