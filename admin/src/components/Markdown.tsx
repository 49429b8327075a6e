import { Grid, Paper, Text, Textarea, Typography } from '@mantine/core';
import ReactMarkdown from 'react-markdown';
import { useI18n } from '../i18n';

/** Only web, mail and in-site links; `javascript:` and other schemes lose their URL (the link becomes inert). */
function safeUrl(url: string): string | null {
  const value = url.trim();
  if (/^(https?:|mailto:)/i.test(value)) return value;
  if (!/^[a-z][a-z0-9+.-]*:/i.test(value)) return value;
  return null;
}

/**
 * Markdown rendered safely: react-markdown builds React elements (no innerHTML), raw HTML in the
 * text is not interpreted (`skipHtml`), and link/image URLs are filtered.
 */
export function MarkdownPreview({ source }: { source: string }) {
  return (
    <Typography>
      <ReactMarkdown skipHtml urlTransform={safeUrl}>
        {source}
      </ReactMarkdown>
    </Typography>
  );
}

/** A Markdown textarea with its live preview beside it. */
export function MarkdownEditor({
  label,
  value,
  onChange,
  testId,
}: {
  label: string;
  value: string;
  onChange: (value: string) => void;
  testId?: string;
}) {
  const { t } = useI18n();
  return (
    <Grid>
      <Grid.Col span={{ base: 12, md: 6 }}>
        <Textarea
          label={label}
          description={t('markdownHint')}
          value={value}
          onChange={(e) => onChange(e.currentTarget.value)}
          autosize
          minRows={8}
          data-testid={testId}
        />
      </Grid.Col>
      <Grid.Col span={{ base: 12, md: 6 }}>
        <Text size="sm" fw={500} mb={4}>
          {t('preview')}
        </Text>
        <Paper withBorder p="sm" mih={180} data-testid={testId ? `${testId}-preview` : undefined}>
          <MarkdownPreview source={value} />
        </Paper>
      </Grid.Col>
    </Grid>
  );
}
